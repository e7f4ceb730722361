//! `cargo xtask mutants` stopped by a signal while a mutation builds leaves
//! the tree as it found it, byte for byte and time for time: the mutation
//! is only ever in the copy under the target directory, and the next run
//! makes the copy the tree's again, whatever was left in it. Runs
//! `cargo xtask mutants` as a user runs it, in a process group of its own,
//! as Ctrl-C (SIGINT) and a CI timeout or `kill` (SIGTERM) stop it.
//! Needs what `cargo xtask setup` installs (feature `integration`).

use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader},
    os::unix::process::{CommandExt as _, ExitStatusExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant, SystemTime},
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn git(args: &[&str]) -> String {
    // No index refresh: the test reads the tree, it writes nothing of it.
    let out = Command::new("git").args(args).current_dir(root()).env("GIT_OPTIONAL_LOCKS", "0").output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Every tracked file's bytes and modification time (None: not in the
/// working tree), and `git status --porcelain` (untracked files included).
struct Tree {
    files: BTreeMap<String, Option<(Vec<u8>, SystemTime)>>,
    status: String,
}

impl Tree {
    fn read() -> Self {
        let files = git(&["ls-files", "-z"])
            .split('\0')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let path = root().join(p);
                let file = std::fs::read(&path).ok().zip(std::fs::metadata(&path).and_then(|m| m.modified()).ok());
                (p.to_string(), file)
            })
            .collect();
        Self { files, status: git(&["status", "--porcelain"]) }
    }

    /// The tracked files whose bytes in `dir` are not these.
    fn differing_in(&self, dir: &Path) -> Vec<String> {
        self.files
            .iter()
            .filter(|(p, f)| std::fs::read(dir.join(p)).ok().as_deref() != f.as_ref().map(|(bytes, _)| &bytes[..]))
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn assert_unchanged(&self, after: &str) {
        let now = Tree::read();
        let changed: Vec<&String> =
            self.files.iter().filter(|(p, f)| now.files.get(*p) != Some(f)).map(|(p, _)| p).collect();
        assert!(changed.is_empty(), "{after}, tracked files changed (bytes or time): {changed:?}");
        assert_eq!(now.files.len(), self.files.len(), "{after}, the tracked files are not the same");
        assert_eq!(now.status, self.status, "{after}, `git status --porcelain` differs");
    }
}

/// The processes of a process group.
fn group(pgid: i32) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // After the command name: state, ppid, pgrp.
        let pgrp = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(2)?.parse::<i32>().ok());
        if pgrp == Some(pgid) {
            pids.push(pid);
        }
    }
    pids
}

/// Each process: its pid, command line, and the signals it ignores,
/// blocks and catches (hex masks of /proc/PID/status), to say which one
/// outlived a signal and why.
fn describe(pids: &[i32]) -> String {
    pids.iter()
        .map(|pid| {
            let args = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args = String::from_utf8_lossy(&args).replace('\0', " ");
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let masks: Vec<&str> =
                status.lines().filter(|l| ["SigBlk:", "SigIgn:", "SigCgt:"].iter().any(|k| l.starts_with(k))).collect();
            format!("  {pid} {} [{}]", args.trim_end(), masks.join(" "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether a process of the group is rustc building the agent's unit tests
/// in `copy`.
fn building_in(pgid: i32, copy: &Path) -> bool {
    group(pgid).into_iter().any(|pid| {
        let args = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = args.split(|b| *b == 0).collect();
        let crate_name = args.windows(2).any(|w| w[0] == b"--crate-name" && w[1] == b"sandwatch");
        crate_name
            && args.contains(&&b"--test"[..])
            && std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == copy)
    })
}

/// `cargo xtask mutants` in a process group of its own; its group is
/// killed if the test ends before it does.
struct Run {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Run {
    fn start() -> Self {
        let mut command = Command::new(env!("CARGO"));
        command
            .args(["xtask", "mutants"])
            .current_dir(root())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        // A shell that runs the suite in the background without job control
        // (CI, `cmd &` in a script) starts it with SIGINT and SIGQUIT
        // ignored, and that is inherited: the run then outlives the Ctrl-C
        // this test sends. A terminal's Ctrl-C reaches a run whose signals
        // are the default ones; so does this test's.
        // SAFETY: signal(2) and sigprocmask(2) are async-signal-safe; the
        // child is between fork and exec.
        unsafe {
            command.pre_exec(|| {
                for signal in [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM] {
                    if libc::signal(signal, libc::SIG_DFL) == libc::SIG_ERR {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
        let mut child = command.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("  | {line}");
                let _ = tx.send(line);
            }
        });
        Self { child, lines }
    }

    fn pgid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The copy the run says it mutates.
    fn copy(&self) -> PathBuf {
        let deadline = Instant::now() + Duration::from_secs(600);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let line = self.lines.recv_timeout(left).expect("`cargo xtask mutants` ended or said nothing of its copy");
            if let Some(rest) = line.strip_prefix("mutants: mutating a copy of the tree in ") {
                return PathBuf::from(rest.rsplit_once(" (").map_or(rest, |(dir, _)| dir));
            }
        }
        panic!("`cargo xtask mutants` said nothing of its copy in 10 minutes");
    }

    /// Waits until rustc builds a mutation in `copy` (a cold target builds
    /// everything first).
    fn wait_for_a_mutation_build(&mut self, copy: &Path) {
        let deadline = Instant::now() + Duration::from_secs(1200);
        while !building_in(self.pgid(), copy) {
            assert!(self.child.try_wait().unwrap().is_none(), "`cargo xtask mutants` ended before a mutation built");
            assert!(Instant::now() < deadline, "no mutation was built in 20 minutes");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `signal` to the whole group, as a terminal or CI runner does,
    /// and waits for every process of it to end.
    fn stop(&mut self, signal: i32) -> std::process::ExitStatus {
        // SAFETY: kill(2) on the process group this test started.
        assert_eq!(unsafe { libc::kill(-self.pgid(), signal) }, 0);
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "`cargo xtask mutants` still runs 60 s after signal {signal}; its group:\n{}",
                describe(&group(self.pgid()))
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        while !group(self.pgid()).is_empty() {
            assert!(Instant::now() < deadline, "processes of the run outlive it:\n{}", describe(&group(self.pgid())));
            std::thread::sleep(Duration::from_millis(20));
        }
        status
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        // SAFETY: as in `stop`; a no-op once the group is gone.
        unsafe { libc::kill(-self.pgid(), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// Starts a run, stops it with `signal` while a mutation builds, and
/// checks the tree; returns the copy and the file mutated in it.
fn interrupt(signal: i32, before: &Tree) -> (PathBuf, String) {
    let mut run = Run::start();
    let copy = run.copy();
    run.wait_for_a_mutation_build(&copy);
    let mutated = before.differing_in(&copy);
    let status = run.stop(signal);
    assert_eq!(status.signal(), Some(signal), "the run was not stopped by signal {signal}: {status}");
    // The copy held exactly one change, a mutation of the agent: a stale
    // copy was refreshed before it.
    assert!(
        mutated.len() == 1 && mutated[0].starts_with("agent/src/"),
        "while a mutation built, the copy differed from the tree in {mutated:?}"
    );
    before.assert_unchanged(&format!("after signal {signal} during a mutation's build"));
    // What a signal leaves behind is in the copy.
    assert_eq!(before.differing_in(&copy), mutated, "the signal did not stop the run with its mutation in place");
    (copy, mutated[0].clone())
}

#[test]
fn a_run_stopped_by_a_signal_leaves_the_tree_unchanged() {
    let before = Tree::read();
    let (copy, _) = interrupt(libc::SIGINT, &before);

    // The copy as a killed run may leave it, and worse: the mutation still
    // in it, another file changed at the same size and time, a file the
    // tree does not have. The next run must not trust it.
    let lib = copy.join("agent/src/lib.rs");
    let time = std::fs::metadata(&lib).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&lib).unwrap();
    bytes[0] = if bytes[0] == b'/' { b'#' } else { b'/' };
    std::fs::write(&lib, &bytes).unwrap();
    std::fs::File::open(&lib).unwrap().set_modified(time).unwrap();
    let extra = copy.join("agent/src/left_by_a_killed_run.rs");
    std::fs::write(&extra, "compile_error!(\"stale\");\n").unwrap();

    let (_, mutated) = interrupt(libc::SIGTERM, &before);
    assert_ne!(mutated, "agent/src/lib.rs");
    assert!(!extra.exists(), "a file the tree does not have stayed in the copy");
}
