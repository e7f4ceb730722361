//! The `sandwatch` binary as a user runs it: serves /metrics, counts real
//! exits and OOM kills, stops cleanly on SIGTERM, and refuses bad input and
//! missing privileges with one line.

mod harness;

use std::{os::unix::fs::PermissionsExt as _, process::Command, time::Duration};

use harness::{memory_hog, metric, require_root, sh, AgentProcess, TestCgroup};

/// Programs of ours that are loaded in the kernel right now (names are cut
/// to 15 bytes by the kernel).
fn our_programs_loaded() -> usize {
    const OURS: [&str; 6] = [
        "sched_process_e",
        "sched_process_f",
        "mark_victim",
        "cgroup_mkdir",
        "cgroup_rmdir",
        "cgroup_attach_t",
    ];
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|p| p.name_as_str().is_some_and(|n| OURS.contains(&n)))
        .count()
}

#[test]
fn agent_counts_exits_and_oom_kills_then_detaches_on_sigterm() {
    require_root();
    let before = our_programs_loaded();
    let agent = AgentProcess::start(&[]);
    assert_eq!(our_programs_loaded(), before + 6, "six programs attached");
    let m0 = agent.metrics();
    let exits0 = metric(&m0, "sandwatch_events_total{kind=\"exit\"}").expect("exit counter");
    let ooms0 = metric(&m0, "sandwatch_events_total{kind=\"oom_kill\"}").expect("oom counter");
    assert_eq!(metric(&m0, "sandwatch_programs_attached"), Some(6.0));

    for code in 0..20 {
        sh(&format!("exit {code}")).wait().expect("wait");
    }
    let cg = TestCgroup::create("agent-oom");
    cg.set_memory_limit(&cg.path, 32 << 20);
    for _ in 0..2 {
        memory_hog(&cg.procs_file(&cg.path), 256).wait().expect("wait hog");
    }
    drop(cg);

    let mut m1 = String::new();
    for _ in 0..100 {
        m1 = agent.metrics();
        let ooms = metric(&m1, "sandwatch_events_total{kind=\"oom_kill\"}").unwrap_or(0.0);
        let exits = metric(&m1, "sandwatch_events_total{kind=\"exit\"}").unwrap_or(0.0);
        if ooms - ooms0 >= 2.0 && exits - exits0 >= 22.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let ooms = metric(&m1, "sandwatch_events_total{kind=\"oom_kill\"}").unwrap_or(0.0) - ooms0;
    let exits = metric(&m1, "sandwatch_events_total{kind=\"exit\"}").unwrap_or(0.0) - exits0;
    // Only this test makes OOM kills here; other exits on the machine may add up.
    assert_eq!(ooms, 2.0, "two OOM kills counted:\n{m1}");
    assert!(exits >= 22.0, "20 exits + 2 OOM-killed hogs counted, got {exits}");
    assert_eq!(metric(&m1, "sandwatch_events_dropped_total{stage=\"kernel\"}"), Some(0.0));
    assert_eq!(metric(&m1, "sandwatch_events_dropped_total{stage=\"channel\"}"), Some(0.0));
    assert_eq!(metric(&m1, "sandwatch_events_dropped_total{stage=\"decode\"}"), Some(0.0));

    let (status, log) = agent.terminate(Duration::from_secs(10));
    assert!(status.success(), "exit 0 after SIGTERM, got {status}: {log}");
    assert!(log.contains("OOM kill: victim pid"), "OOM kills are logged: {log}");
    assert_eq!(our_programs_loaded(), before, "programs detached after exit");
}

#[test]
fn invalid_flag_is_one_line_and_exit_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_sandwatch"))
        .args(["--ring-buffer-bytes", "5000"])
        .output()
        .expect("run sandwatch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.contains("power of two"), "{stderr}");
}

#[test]
fn unprivileged_run_fails_with_one_line() {
    require_root();
    // A copy nobody can execute, wherever the checkout lives.
    let dir = std::env::temp_dir().join(format!("sandwatch-unpriv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
    let bin = dir.join("sandwatch");
    std::fs::copy(env!("CARGO_BIN_EXE_sandwatch"), &bin).expect("copy binary");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod bin");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(&bin)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .expect("run setpriv (util-linux)");
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.contains("needs root"), "{stderr}");
}
