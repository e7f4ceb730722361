//! Why a container's init exited, as kube-state-metrics' "last terminated
//! reason" would say it, but for every exit: `completed` (status 0),
//! `error` (another status), `oom_killed` (the OOM killer's victim: an OOM
//! kill stays an OOM kill), `killed` (SIGKILL from anyone else), or the
//! signal's name. Bounded: signals without a name here read `signal`.

use crate::events::ExitStatus;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum ExitReason {
    Completed,
    Error,
    OomKilled,
    Killed,
    Sighup,
    Sigint,
    Sigquit,
    Sigill,
    Sigtrap,
    Sigabrt,
    Sigbus,
    Sigfpe,
    Sigusr1,
    Sigsegv,
    Sigusr2,
    Sigpipe,
    Sigalrm,
    Sigterm,
    Sigxcpu,
    Sigxfsz,
    Sigsys,
    /// A signal not named above (real-time signals, ...).
    Signal,
}

impl ExitReason {
    /// The reason of an exit with `status`; `oom` when the OOM killer
    /// picked the process (or its container's start).
    pub fn of(status: ExitStatus, oom: bool) -> Self {
        use ExitReason::*;
        if oom {
            return OomKilled;
        }
        match status {
            ExitStatus::Code(0) => Completed,
            ExitStatus::Code(_) => Error,
            ExitStatus::Signal { signo, .. } => match i32::from(signo) {
                libc::SIGKILL => Killed,
                libc::SIGHUP => Sighup,
                libc::SIGINT => Sigint,
                libc::SIGQUIT => Sigquit,
                libc::SIGILL => Sigill,
                libc::SIGTRAP => Sigtrap,
                libc::SIGABRT => Sigabrt,
                libc::SIGBUS => Sigbus,
                libc::SIGFPE => Sigfpe,
                libc::SIGUSR1 => Sigusr1,
                libc::SIGSEGV => Sigsegv,
                libc::SIGUSR2 => Sigusr2,
                libc::SIGPIPE => Sigpipe,
                libc::SIGALRM => Sigalrm,
                libc::SIGTERM => Sigterm,
                libc::SIGXCPU => Sigxcpu,
                libc::SIGXFSZ => Sigxfsz,
                libc::SIGSYS => Sigsys,
                _ => Signal,
            },
        }
    }

    /// A failure, not a container that did its work: what a crash loop is.
    pub fn failed(self) -> bool {
        self != ExitReason::Completed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_signals_read_as_an_operator_reads_them() {
        let sig = |signo| ExitStatus::Signal { signo, core_dumped: false };
        assert_eq!(ExitReason::of(ExitStatus::Code(0), false), ExitReason::Completed);
        assert_eq!(ExitReason::of(ExitStatus::Code(3), false), ExitReason::Error);
        assert_eq!(ExitReason::of(sig(9), false), ExitReason::Killed);
        assert_eq!(ExitReason::of(sig(9), true), ExitReason::OomKilled, "an OOM kill stays an OOM kill");
        assert_eq!(ExitReason::of(sig(15), false), ExitReason::Sigterm);
        assert_eq!(ExitReason::of(ExitStatus::Signal { signo: 11, core_dumped: true }, false), ExitReason::Sigsegv);
        assert_eq!(ExitReason::of(sig(40), false), ExitReason::Signal);
        let label: &str = ExitReason::Sigsegv.into();
        assert_eq!(label, "sigsegv");
        assert!(!ExitReason::Completed.failed() && ExitReason::Sigterm.failed());
    }
}
