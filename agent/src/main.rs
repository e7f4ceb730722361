use std::process::ExitCode;

use sandwatch::config::{Config, ConfigExit};

fn main() -> ExitCode {
    let config = match Config::from_args(std::env::args_os()) {
        Ok(config) => config,
        Err(ConfigExit::Info(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(ConfigExit::Invalid(line)) => {
            eprintln!("sandwatch: {line}");
            return ExitCode::from(2);
        }
    };
    sandwatch::init_logging(&config.log_level, config.log_format);
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sandwatch: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(sandwatch::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::debug!("full error: {e:?}");
            eprintln!("sandwatch: {}", sandwatch::one_line(&e));
            ExitCode::FAILURE
        }
    }
}
