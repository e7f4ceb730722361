use std::process::ExitCode;

use sandwatch::{
    cli::{self, Invocation},
    config::{ConfigExit, Settings},
    telemetry::logs,
};

fn main() -> ExitCode {
    match cli::parse(std::env::args_os()) {
        Ok(Invocation::Agent(settings)) => agent(*settings),
        Ok(Invocation::Events(args)) => cli::events::main(&args),
        Err(ConfigExit::Info(text)) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(ConfigExit::Invalid(line)) => {
            eprintln!("sandwatch: {line}");
            ExitCode::from(2)
        }
    }
}

fn agent(settings: Settings) -> ExitCode {
    sandwatch::os::one_malloc_arena();
    logs::init(&settings.log.level, settings.log.format);
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sandwatch: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(sandwatch::run(settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::debug!("full error: {e:?}");
            eprintln!("sandwatch: {}", sandwatch::one_line(&e));
            ExitCode::FAILURE
        }
    }
}
