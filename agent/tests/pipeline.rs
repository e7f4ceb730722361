//! Privileged tests of the kernel-to-agent path: the real programs on the
//! real kernel, real exits, real memcg OOM kills. Run as root, one at a time
//! (`cargo xtask test`). Every test filters the kernel's events down to the
//! processes it started itself.

mod harness;

use std::{collections::HashMap, time::Duration};

use agent_common::{names, EventKind};
use sandwatch::{
    events::{
        kernel::{SenderPlace, Signal, SignalOrigin},
        Event, ExitStatus,
    },
    pipeline::Pipeline,
    probes::{reader::ASLEEP_DRAIN, ProbeOptions},
    stats::DrainCause,
};
use tokio_util::sync::CancellationToken;

use harness::{collect, fork_into, memory_hog, pause_forever, reap, require_root, sh, timed_out, TestCgroup};

fn start(opts: ProbeOptions) -> Pipeline {
    require_root();
    Pipeline::start(&opts, 1 << 16, CancellationToken::new())
        .unwrap_or_else(|e| panic!("pipeline failed to start: {e}"))
}

/// Children in a cgroup created after the programs attached (the kernel
/// tracks it from its mkdir, as it would a new container's): one exit
/// record each, with pid, parent, comm, status and cgroup. A child outside
/// tracked cgroups is counted in the kernel and not streamed.
#[tokio::test(flavor = "current_thread")]
async fn exits_carry_pid_comm_parent_cgroup_and_status() {
    let mut pipeline = start(ProbeOptions::default());
    let cg = TestCgroup::create("exits");
    let cg_id = cg.id();
    let procs = cg.procs_file(&cg.path).display().to_string();
    let host_before = pipeline.kernel.unstreamed().host_exits;

    // Distinct exit codes, a SIGTERM and a SIGKILL.
    let mut expected: HashMap<u32, ExitStatus> = HashMap::new();
    let mut children = Vec::new();
    for code in [0u8, 3, 42, 255] {
        let child = sh(&format!("echo $$ > {procs} && exit {code}"));
        expected.insert(child.id(), ExitStatus::Code(code));
        children.push(child);
    }
    for signo in [libc::SIGTERM, libc::SIGKILL] {
        let child = sh(&format!("echo $$ > {procs} && exec sleep 30"));
        // Killed only once it is `sleep`: it has joined the tracked cgroup
        // by then (a slow VM may take longer than any fixed pause).
        wait_for_comm(child.id(), "sleep");
        // SAFETY: kill(2) of our own child, by pid.
        unsafe { libc::kill(child.id() as i32, signo) };
        expected.insert(child.id(), ExitStatus::Signal { signo: signo as u8, core_dumped: false });
        children.push(child);
    }
    for mut c in children {
        c.wait().expect("wait child");
    }
    // And one of the host's: counted, not streamed.
    let mut host = sh("exit 7");
    let host_pid = host.id();
    host.wait().expect("wait host child");

    let pids: Vec<u32> = expected.keys().copied().collect();
    let ours = |e: &Event| matches!(e, Event::Exit(x) if pids.contains(&x.tgid));
    let mut exits = collect(&mut pipeline.events, Duration::from_secs(10), ours, |kept| kept.len() >= pids.len()).await;
    // A grace period in which a duplicate would show up.
    exits.extend(collect(&mut pipeline.events, Duration::from_millis(500), ours, |_| false).await);

    let me = std::process::id();
    let mut seen: HashMap<u32, usize> = HashMap::new();
    for e in &exits {
        let Event::Exit(x) = e else { unreachable!() };
        *seen.entry(x.tgid).or_default() += 1;
        assert_eq!(x.pid, x.tgid, "single-threaded child");
        assert!(x.group_dead, "{x:?}");
        assert_eq!(x.ppid, me, "parent of {x:?}");
        let comm = if matches!(x.status, ExitStatus::Code(_)) { "sh" } else { "sleep" };
        assert_eq!(x.comm, comm, "{x:?}");
        assert_eq!(x.status, expected[&x.tgid], "status of pid {}", x.tgid);
        assert_eq!(x.cgroup_id, Some(cg_id), "the tracked cgroup they joined");
        assert!(x.start_ns > 0 && x.start_ns < x.ts_ns, "{x:?}");
    }
    for pid in &pids {
        assert_eq!(seen.get(pid), Some(&1), "exactly one exit event for pid {pid}: {exits:?}");
    }
    let host_exits = collect(
        &mut pipeline.events,
        Duration::from_millis(300),
        |e| matches!(e, Event::Exit(x) if x.tgid == host_pid),
        |_| false,
    )
    .await;
    assert!(host_exits.is_empty(), "a host process's exit is not streamed: {host_exits:?}");
    let counted = pipeline.kernel.unstreamed().host_exits - host_before;
    assert!(counted >= 1, "the host process's exit is counted in the kernel");
    drop(cg);
    pipeline.stop().await;
}

/// The senders of signals that end pods' processes, as the kernel saw
/// them, in a cgroup tracked from its mkdir: a SIGKILL from this (host)
/// process; a SIGTERM the target ignores, from the host (a request to stop
/// is streamed though it ends nothing); a process of the cgroup ending
/// itself with an unhandled SIGUSR1; a real segfault (the kernel's own
/// siginfo); the OOM killer's SIGKILL (the kernel's private siginfo). And
/// what ends nothing stays in the kernel: a SIGUSR1 the target handles,
/// sent from inside its own cgroup; a SIGTERM its sibling sends it while
/// it waits for one in `sigtimedwait(2)`; the SIGCHLD of every exit. (A
/// SIGTERM the leader blocks, to a process of two threads, does end it.) A
/// POSIX timer's SIGALRM is the kernel's notice; the same code sent
/// through `rt_sigqueueinfo(2)` by this (host) process is its own.
#[tokio::test(flavor = "current_thread")]
async fn signals_that_end_pod_processes_name_their_sender() {
    let mut pipeline = start(ProbeOptions::default());
    let cg = TestCgroup::create("signals");
    let cg_id = cg.id();
    // The OOM kill's cgroup, apart (on v2 a cgroup whose memory controller
    // is handed to a child takes no process of its own).
    let oom_cg = TestCgroup::create("signals-oom");
    oom_cg.set_memory_limit(&oom_cg.path, 32 << 20);
    let oom_id = oom_cg.id();
    let procs = cg.procs_file(&cg.path).display().to_string();
    let own_path = cg.path.rsplit_once('/').map_or(String::new(), |(parent, _)| parent.to_string());
    let own_id = cg.id_of(if own_path.is_empty() { "/" } else { &own_path });
    let me = std::process::id();

    let killed = sh(&format!("echo $$ > {procs} && exec sleep 30"));
    wait_for_comm(killed.id(), "sleep");
    // SAFETY: kill(2) of our own children, by pid.
    unsafe { libc::kill(killed.id() as i32, libc::SIGKILL) };
    // Ignores SIGTERM; asked from outside its cgroup, then killed.
    let ignorer = sh(&format!("echo $$ > {procs} && trap '' TERM && exec sleep 30"));
    wait_for_comm(ignorer.id(), "sleep");
    unsafe { libc::kill(ignorer.id() as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(100));
    unsafe { libc::kill(ignorer.id() as i32, libc::SIGKILL) };
    // Ends itself: SIGUSR1 at its default action.
    let own = sh(&format!("echo $$ > {procs} && kill -USR1 $$; sleep 30"));
    // Handles SIGUSR1, sent by its sibling in the same cgroup, then exits 0:
    // the sibling's exit sends its parent (the handler's shell) SIGCHLD.
    let handled = sh(&format!("echo $$ > {procs}; trap 'exit 0' USR1; (kill -USR1 $$); sleep 30"));
    // Waits for SIGTERM (blocked, taken by sigtimedwait), which its
    // sibling sends: the wait takes it, nothing ends.
    let waiter = sigtimedwait_term(&cg.procs_file(&cg.path));
    let start = std::time::Instant::now();
    while !in_syscall(waiter, libc::SYS_rt_sigtimedwait) {
        assert!(start.elapsed() < Duration::from_secs(10), "pid {waiter} never waited in sigtimedwait");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sibling = sh(&format!("echo $$ > {procs} && kill -TERM {waiter}"));
    // Two threads, the leader blocking SIGTERM: its sibling's SIGTERM ends
    // it through the other thread.
    let threaded = leader_blocks_term(&cg.procs_file(&cg.path));
    let start = std::time::Instant::now();
    while !blocks_with_threads(threaded, libc::SIGTERM, 2) {
        assert!(start.elapsed() < Duration::from_secs(10), "pid {threaded} never had two threads, SIGTERM blocked");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ender = sh(&format!("echo $$ > {procs} && kill -TERM {threaded}"));
    // A real fault: the stack overflows.
    let faulted = sh(&format!("echo $$ > {procs} && ulimit -s 256 && f() {{ f; }} && f"));
    // Its own POSIX timer ends it; a timer's code, forged, ends another.
    let timed = timed_out(&cg.procs_file(&cg.path), None, 1);
    let forged = sh(&format!("echo $$ > {procs} && exec sleep 30"));
    wait_for_comm(forged.id(), "sleep");
    // SAFETY: the siginfo is zeroed then filled; sent to our own child.
    let sent = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        info.si_signo = libc::SIGALRM;
        info.si_code = -2; // SI_TIMER
        libc::syscall(libc::SYS_rt_sigqueueinfo, forged.id() as libc::pid_t, libc::SIGALRM, &info)
    };
    assert_eq!(sent, 0, "rt_sigqueueinfo: {}", std::io::Error::last_os_error());
    // The OOM killer's kill, in a limited cgroup of its own.
    let hog = memory_hog(&oom_cg.procs_file(&oom_cg.path), 64);

    let pids = [
        killed.id(),
        ignorer.id(),
        own.id(),
        handled.id(),
        faulted.id(),
        hog.id(),
        waiter,
        timed,
        forged.id(),
        threaded,
    ];
    let ender_pid = ender.id();
    for mut c in [killed, ignorer, own, handled, faulted, hog, sibling, forged, ender] {
        c.wait().expect("wait child");
    }
    let status = reap(threaded);
    assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGTERM, "its other thread: {status:#x}");
    let status = reap(waiter);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the wait took the SIGTERM: {status:#x}");
    let status = reap(timed);
    assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGALRM, "its timer: {status:#x}");
    let ours = |e: &Event| match e {
        Event::Signal(s) => pids.contains(&s.target_tgid) || pids.contains(&s.sender_tgid),
        Event::Exit(x) => pids.contains(&x.tgid),
        _ => false,
    };
    let exits = |kept: &[Event]| kept.iter().filter(|e| matches!(e, Event::Exit(_))).count();
    let mut events = collect(&mut pipeline.events, Duration::from_secs(15), ours, |k| exits(k) >= pids.len()).await;
    events.extend(collect(&mut pipeline.events, Duration::from_millis(500), ours, |_| false).await);
    let signals: Vec<&Signal> =
        events.iter().filter_map(|e| if let Event::Signal(s) = e { Some(s) } else { None }).collect();
    let to = |pid: u32| -> Vec<&Signal> { signals.iter().copied().filter(|s| s.target_tgid == pid).collect() };
    let all = format!("{signals:#?}");

    // Each signal before the exit it caused, in the stream's order.
    for pid in [pids[0], pids[1], pids[2], pids[4], pids[5], pids[7], pids[8], pids[9]] {
        let signal_at =
            events.iter().position(|e| matches!(e, Event::Signal(s) if s.target_tgid == pid && s.result == 0));
        let exit_at = events.iter().position(|e| matches!(e, Event::Exit(x) if x.tgid == pid));
        assert!(matches!((signal_at, exit_at), (Some(a), Some(b)) if a < b), "pid {pid}: {events:#?}");
    }
    let host = SenderPlace::Host(own_id);
    let killed = to(pids[0]);
    assert_eq!(killed.len(), 1, "{all}");
    let k = killed[0];
    assert_eq!((k.sig, k.origin, k.result, k.sender_tgid, k.sender), (9, SignalOrigin::Info(0), 0, me, host), "{k:?}");
    assert_eq!(k.target_cgroup_id, Some(cg_id), "{k:?}");
    assert!(k.target_start_ns > 0 && k.sender_start_ns > 0, "{k:?}");
    let ignorer: Vec<(u32, u32)> = to(pids[1]).iter().map(|s| (s.sig, s.result)).collect();
    assert_eq!(ignorer, [(15, 1), (9, 0)], "the ignored request to stop, then the kill: {all}");
    let own = to(pids[2]);
    assert_eq!(own.len(), 1, "{all}");
    assert_eq!((own[0].sig, own[0].sender_tgid, own[0].sender), (10, pids[2], SenderPlace::Tracked(cg_id)));
    assert!(to(pids[3]).is_empty(), "a handled signal from inside its cgroup is the tenant's own: {all}");
    assert!(to(waiter).is_empty(), "a signal waited for, from inside its cgroup, is the tenant's own: {all}");
    let timer: Vec<(u32, SignalOrigin)> = to(timed).iter().map(|s| (s.sig, s.origin)).collect();
    assert_eq!(timer, [(14, SignalOrigin::Kernel(-2))], "a timer's siginfo is the kernel's own: {all}");
    let forged: Vec<(u32, SignalOrigin, u32)> = to(pids[8]).iter().map(|s| (s.sig, s.origin, s.sender_tgid)).collect();
    assert_eq!(forged, [(14, SignalOrigin::Info(-2), me)], "a syscall's copy is its sender's: {all}");
    let threaded: Vec<(u32, u32, SenderPlace)> = to(pids[9]).iter().map(|s| (s.sig, s.sender_tgid, s.sender)).collect();
    assert_eq!(threaded, [(15, ender_pid, SenderPlace::Tracked(cg_id))], "its leader blocked it, it ended: {all}");
    let faulted = to(pids[4]);
    assert_eq!(faulted.len(), 1, "{all}");
    assert!(
        faulted[0].sig == 11 && matches!(faulted[0].origin, SignalOrigin::Info(code) if code > 0),
        "a fault's siginfo is the kernel's: {:?}",
        faulted[0]
    );
    let oom = to(pids[5]);
    assert!(!oom.is_empty(), "{all}");
    assert_eq!((oom[0].sig, oom[0].origin, oom[0].target_cgroup_id), (9, SignalOrigin::Priv, Some(oom_id)));
    assert!(signals.iter().all(|s| s.sig != libc::SIGCHLD as u32), "SIGCHLD is never streamed: {all}");
    drop(oom_cg);
    drop(cg);
    pipeline.stop().await;
}

/// A process forked into `procs`'s cgroup that blocks SIGTERM and waits
/// for it in `sigtimedwait(2)` (up to 30 s): it exits 0 when the wait
/// takes one, 1 otherwise.
fn sigtimedwait_term(procs: &std::path::Path) -> u32 {
    fork_into(procs, |joined| {
        // SAFETY: the set is initialised by sigemptyset before use; system
        // calls on memory this child owns.
        let got = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            let wait = libc::timespec { tv_sec: 30, tv_nsec: 0 };
            libc::sigtimedwait(&set, std::ptr::null_mut(), &wait)
        };
        if joined && got == libc::SIGTERM {
            0
        } else {
            1
        }
    })
}

extern "C" fn pause_thread(_: *mut libc::c_void) -> *mut libc::c_void {
    pause_forever()
}

/// A process forked into `procs`'s cgroup with two threads, SIGTERM at its
/// default action, blocked by its leader only: a SIGTERM to the process
/// goes to the other thread and ends it.
fn leader_blocks_term(procs: &std::path::Path) -> u32 {
    fork_into(procs, |joined| {
        // SAFETY: the set is initialised by sigemptyset before use; the
        // thread only pauses.
        let started = unsafe {
            let mut thread: libc::pthread_t = std::mem::zeroed();
            let started = libc::pthread_create(&mut thread, std::ptr::null(), pause_thread, std::ptr::null_mut()) == 0;
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            started
        };
        if !(joined && started) {
            return 1;
        }
        pause_forever()
    })
}

/// Whether `pid` has `threads` threads and its leader blocks `sig`
/// (`/proc/PID/status`).
fn blocks_with_threads(pid: u32, sig: i32, threads: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let blocked = field("SigBlk:").and_then(|m| u64::from_str_radix(m, 16).ok()).unwrap_or(0);
    field("Threads:") == Some(threads.to_string().as_str()) && (blocked >> (sig - 1)) & 1 == 1
}

/// Whether `pid` is blocked in system call `nr` (`/proc/PID/syscall`).
fn in_syscall(pid: u32, nr: libc::c_long) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/syscall"))
        .is_ok_and(|s| s.split_whitespace().next() == Some(nr.to_string().as_str()))
}

/// A reader that found nothing for a while sleeps: the programs' flag is
/// set, its timer slows to once a second, and the next record — an exit
/// here — wakes it through the kernel at once instead of waiting for it.
#[tokio::test(flavor = "current_thread")]
async fn a_sleeping_reader_is_woken_by_the_next_record() {
    let idle_after = Duration::from_millis(200);
    let mut pipeline = start(ProbeOptions { idle_after, ..ProbeOptions::default() });
    let stats = pipeline.stats.clone();
    let cg = TestCgroup::create("sleep");
    let procs = cg.procs_file(&cg.path).display().to_string();
    let mut child = sh(&format!("echo $$ > {procs} && exec sleep 30"));
    let pid = child.id();
    wait_for_comm(pid, "sleep");

    // The cgroup's records came; then nothing (other cgroups created on
    // the host meanwhile may wake it: it sleeps again after each).
    let asleep_by = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (timer, woken) = (stats.reader_drains(DrainCause::Timer), stats.reader_drains(DrainCause::Wakeup));
        if stats.reader_asleep() {
            tokio::time::sleep(Duration::from_millis(600)).await;
            let timer_asleep = stats.reader_drains(DrainCause::Timer) - timer;
            // Still asleep and not woken meanwhile: 600 ms without records
            // took at most one timer drain (awake: 24).
            if stats.reader_asleep() && stats.reader_drains(DrainCause::Wakeup) == woken {
                assert!(timer_asleep <= 1, "{timer_asleep} timer drains in 600 ms asleep");
                break;
            }
        }
        assert!(std::time::Instant::now() < asleep_by, "the reader never slept {idle_after:?} after the last record");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let woken = stats.reader_drains(DrainCause::Wakeup);
    let killed = std::time::Instant::now();
    // SAFETY: kill(2) of our own child, by pid.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    child.wait().expect("wait child");
    let ours = |e: &Event| matches!(e, Event::Exit(x) if x.tgid == pid);
    let exits = collect(&mut pipeline.events, Duration::from_secs(5), ours, |kept| !kept.is_empty()).await;
    let took = killed.elapsed();
    assert_eq!(exits.len(), 1, "the exit of pid {pid} arrived");
    assert!(stats.reader_drains(DrainCause::Wakeup) > woken, "the exit woke the reader");
    assert!(took < ASLEEP_DRAIN / 2, "the exit took {took:?}: it waited for the sleeping reader's timer");
    drop(cg);
    pipeline.stop().await;
}

/// Set in the child that `multi_threaded_process_ends_exactly_once` starts:
/// this test binary again, running only that test, as a process of
/// several threads.
const THREADS_CHILD: &str = "SANDWATCH_TEST_THREADS_CHILD";

/// Exactly one exit record says the process ended, also when all its
/// threads die at once (SIGKILL); the other threads' exits are counted in
/// the kernel, not streamed. Kernels whose exit tracepoint lacks
/// `group_dead` (6.1, 6.12 in the VM runs) take the probes' other path,
/// where the threads race to claim the end.
#[tokio::test(flavor = "current_thread")]
async fn multi_threaded_process_ends_exactly_once() {
    if std::env::var_os(THREADS_CHILD).is_some() {
        for _ in 0..5 {
            std::thread::spawn(|| std::thread::sleep(Duration::from_secs(120)));
        }
        println!("threads-ready");
        std::thread::sleep(Duration::from_secs(120));
        return;
    }
    use std::io::BufRead as _;
    let mut pipeline = start(ProbeOptions::default());
    let cg = TestCgroup::create("threads");
    for round in 0..3 {
        let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "multi_threaded_process_ends_exactly_once", "--nocapture", "--test-threads=1"])
            .env(THREADS_CHILD, "1")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn threaded child");
        let pid = child.id();
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        while !line.contains("threads-ready") {
            line.clear();
            assert!(out.read_line(&mut line).expect("read child") > 0, "child ended before its threads started");
        }
        let threads = std::fs::read_dir(format!("/proc/{pid}/task")).expect("task dir").count();
        assert!(threads >= 6, "child has {threads} threads");
        // Into a tracked cgroup, all threads at once.
        std::fs::write(cg.procs_file(&cg.path), pid.to_string()).expect("move the child");
        let thread_exits_before = pipeline.kernel.unstreamed().thread_exits;
        // SAFETY: kill(2) of our own child, by pid.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        child.wait().expect("wait child");

        let ours = |e: &Event| matches!(e, Event::Exit(x) if x.tgid == pid);
        let mut exits = collect(&mut pipeline.events, Duration::from_secs(10), ours, |kept| !kept.is_empty()).await;
        exits.extend(collect(&mut pipeline.events, Duration::from_millis(500), ours, |_| false).await);
        let ended: Vec<&Event> = exits.iter().filter(|e| matches!(e, Event::Exit(x) if x.group_dead)).collect();
        assert_eq!(exits.len(), 1, "round {round}: only the process's end is streamed: {exits:?}");
        assert_eq!(ended.len(), 1, "round {round}: exactly one exit ends the process: {exits:?}");
        let thread_exits = pipeline.kernel.unstreamed().thread_exits - thread_exits_before;
        assert!(
            thread_exits >= threads as u64 - 1,
            "round {round}: the other {} threads' exits counted, {thread_exits}",
            threads - 1
        );
        for e in &exits {
            let Event::Exit(x) = e else { unreachable!() };
            assert_eq!(x.status, ExitStatus::Signal { signo: libc::SIGKILL as u8, core_dumped: false }, "{x:?}");
        }
    }
    drop(cg);
    pipeline.stop().await;
}

#[tokio::test(flavor = "current_thread")]
async fn memcg_oom_kill_names_victim_and_cgroup_in_order() {
    let mut pipeline = start(ProbeOptions::default());
    let cg = TestCgroup::create("oom");
    let cg_id = cg.id();
    cg.set_memory_limit(&cg.path, 32 << 20);
    let mut hog = memory_hog(&cg.procs_file(&cg.path), 256);
    let pid = hog.id();
    let status = hog.wait().expect("wait hog");
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "the hog must be OOM-killed: {status:?}");
    let path = cg.path.clone();
    drop(cg); // rmdir

    let events = collect(
        &mut pipeline.events,
        Duration::from_secs(10),
        |e| match e {
            Event::CgroupMkdir(c) | Event::CgroupRmdir(c) => c.path == path,
            Event::CgroupAttach(a) => a.cgroup.path == path && a.pid == pid,
            Event::OomKill(o) => o.victim_pid == pid,
            Event::Exit(x) => x.tgid == pid,
            // The OOM killer's SIGKILL: signals are another test's.
            Event::Signal(_) => false,
        },
        |kept| kept.iter().any(|e| matches!(e, Event::CgroupRmdir(_))),
    )
    .await;
    let kinds: Vec<EventKind> = events.iter().map(Event::kind).collect();
    assert_eq!(
        kinds,
        [EventKind::CgroupMkdir, EventKind::CgroupAttach, EventKind::OomKill, EventKind::Exit, EventKind::CgroupRmdir],
        "{events:#?}"
    );
    for e in &events {
        match e {
            Event::CgroupMkdir(c) | Event::CgroupRmdir(c) => assert_eq!(c.cgroup_id, cg_id),
            Event::CgroupAttach(a) => {
                assert_eq!(a.cgroup.cgroup_id, cg_id);
                assert_eq!(a.comm, "sh");
            }
            Event::OomKill(o) => {
                let victim = o.victim.expect("victim known to the task table");
                assert_eq!(victim.cgroup_id, cg_id, "victim's memory cgroup");
                assert_eq!(victim.tgid, pid);
                if o.rss.is_some() {
                    assert_eq!(o.victim_comm, "dd");
                }
                assert_eq!(o.trigger_cgroup_id, cg_id, "dd itself ran out of memory");
            }
            Event::Exit(x) => {
                assert_eq!(x.status, ExitStatus::Signal { signo: 9, core_dumped: false });
                assert_eq!(x.cgroup_id, Some(cg_id));
                assert_eq!(x.comm, "dd");
            }
            Event::Signal(_) => {}
        }
    }
    let ts: Vec<u64> = events
        .iter()
        .map(|e| match e {
            Event::CgroupMkdir(c) | Event::CgroupRmdir(c) => c.ts_ns,
            Event::CgroupAttach(a) => a.cgroup.ts_ns,
            Event::OomKill(o) => o.ts_ns,
            Event::Exit(x) => x.ts_ns,
            Event::Signal(s) => s.ts_ns,
        })
        .collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "kernel timestamps in order: {ts:?}");
    pipeline.stop().await;
}

/// Which hooks name an OOM victim on this kernel. On cgroup v2 where
/// `mark_victim` passes the victim's task (its record gained `total_vm` in
/// the same change, so the format file is a witness independent of the
/// BTF the agent reads), the victim's own program, and none at fork; on
/// 6.9 and later that must be so. Elsewhere, the task table kept at fork,
/// and on v1 where the task is passed, the victim's own program too (its
/// memory cgroup). The program at the OOM killer's entry wherever the
/// kernel takes it: every VM kernel.
/// Either way a victim forked inside the cgroup, which no attach names, is
/// named after it is gone: its cgroup, process and the start its exit
/// record carries.
#[tokio::test(flavor = "current_thread")]
async fn a_forked_victim_is_named_by_the_path_this_kernel_loads() {
    use sandwatch::probes::KernelPath;
    let mut pipeline = start(ProbeOptions::default());

    let unified = cgroup_v2();
    let format = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .find_map(|root| std::fs::read_to_string(format!("{root}/events/oom/mark_victim/format")).ok())
        .expect("the oom:mark_victim format file");
    let passes_task = format.contains(" total_vm;");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let version: Vec<u32> = release.split(['.', '-']).take(2).map(|n| n.trim().parse().unwrap()).collect();
    let expected = if unified && passes_task { KernelPath::VictimTask } else { KernelPath::ForkTable };
    let path = pipeline.probes.path();
    let hooks = pipeline.probes.hooks().to_vec();
    eprintln!(
        "kernel {}: cgroup v2 {unified}, mark_victim has total_vm {passes_task}: {path:?}, hooks {hooks:?}",
        release.trim()
    );
    assert_eq!(path, expected, "kernel {}", release.trim());
    if unified && version >= vec![6, 9] {
        assert_eq!(path, KernelPath::VictimTask, "a cgroup v2 kernel from 6.9 on names the victim from its task");
    }
    let decided = *pipeline.probes.oom_decision() == sandwatch::probes::OomDecision::Kernel;
    if cfg!(feature = "vm") {
        assert!(decided, "a Debian kernel takes the program at the OOM killer's entry: {hooks:?}");
    }
    let mut expected_hooks =
        vec![names::PROG_EXIT, names::PROG_OOM, names::PROG_MKDIR, names::PROG_RMDIR, names::PROG_ATTACH];
    if path == KernelPath::ForkTable {
        expected_hooks.extend([names::PROG_FORK, names::PROG_EXEC]);
    }
    expected_hooks.extend(passes_task.then_some(names::PROG_OOM_TASK));
    expected_hooks.extend(decided.then_some(names::PROG_OOM_CONTROL));
    // Every kernel of the matrix passes a signal's sender and target.
    expected_hooks.push(names::PROG_SIGNAL);
    assert_eq!(pipeline.probes.signals_unread(), None);
    let (mut got, mut want) = (hooks.clone(), expected_hooks);
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "{path:?}");

    // sh joins the cgroup, then forks dd (not exec: a command follows).
    let cg = TestCgroup::create("forked-oom");
    let cg_id = cg.id();
    cg.set_memory_limit(&cg.path, 32 << 20);
    let mut parent = sh(&format!(
        "echo $$ > {} && dd if=/dev/zero of=/dev/null bs=256M count=1; echo after",
        cg.procs_file(&cg.path).display()
    ));
    let sh_pid = parent.id();
    parent.wait().expect("wait sh");
    let path_name = cg.path.clone();
    drop(cg);

    let events = collect(
        &mut pipeline.events,
        Duration::from_secs(10),
        |e| match e {
            Event::CgroupRmdir(c) => c.path == path_name,
            Event::CgroupMkdir(_) => false,
            Event::CgroupAttach(a) => a.cgroup.path == path_name,
            Event::OomKill(o) => o.trigger_cgroup_id == cg_id || o.victim.is_some_and(|v| v.cgroup_id == cg_id),
            Event::Exit(x) => x.cgroup_id == Some(cg_id),
            Event::Signal(_) => false,
        },
        |kept| kept.iter().any(|e| matches!(e, Event::CgroupRmdir(_))),
    )
    .await;
    let attached: Vec<u32> =
        events.iter().filter_map(|e| if let Event::CgroupAttach(a) = e { Some(a.pid) } else { None }).collect();
    assert_eq!(attached, [sh_pid], "only sh was moved in: {events:#?}");
    let oom = events.iter().find_map(|e| if let Event::OomKill(o) = e { Some(o) } else { None });
    let oom = oom.unwrap_or_else(|| panic!("an OOM kill in the cgroup: {events:#?}"));
    let victim = oom.victim.unwrap_or_else(|| panic!("the victim is named after it is gone: {oom:#?}"));
    assert_eq!(victim.cgroup_id, cg_id, "the victim's cgroup");
    let exit = events.iter().find_map(|e| match e {
        Event::Exit(x) if x.tgid == victim.tgid => Some(x),
        _ => None,
    });
    let exit = exit.unwrap_or_else(|| panic!("the victim {} exited: {events:#?}", victim.tgid));
    assert_eq!(exit.comm, "dd");
    assert_eq!(exit.ppid, sh_pid, "dd was sh's child, forked in the cgroup");
    assert_eq!(exit.status, ExitStatus::Signal { signo: 9, core_dumped: false });
    assert_eq!(victim.start_ns, exit.start_ns, "the OOM kill and the exit name the same process");
    assert_eq!(oom.victim_pid, victim.tgid);
    pipeline.stop().await;
}

/// Whether /sys/fs/cgroup is cgroup v2 (its file system's magic).
fn cgroup_v2() -> bool {
    let path = std::ffi::CString::new("/sys/fs/cgroup").unwrap();
    // SAFETY: statfs(2) into a zeroed local.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statfs(path.as_ptr(), &mut fs) }, 0, "statfs /sys/fs/cgroup");
    fs.f_type == libc::CGROUP2_SUPER_MAGIC
}

/// A ring buffer overrun far beyond its capacity, with three kinds of
/// events: for each kind, every record the kernel produced is either
/// delivered or counted as dropped, exactly.
#[tokio::test(flavor = "current_thread")]
async fn overrun_ring_buffer_accounts_for_every_event_per_kind() {
    // The exit and cgroup rings at 4 KiB: exits overflow theirs, cgroup changes theirs.
    let mut pipeline =
        start(ProbeOptions { ring_buffer_bytes: 4096, cgroup_ring_bytes: 4096, ..ProbeOptions::default() });
    let kinds = [EventKind::Exit, EventKind::CgroupMkdir, EventKind::CgroupRmdir];
    let snapshot = |p: &Pipeline| kinds.map(|k| (p.kernel.read(k as u32), p.stats.received(k)));
    let before = snapshot(&pipeline);

    // This runtime has one thread and the burst blocks it: the reader
    // cannot drain until the burst is over. 4 KiB holds ~51 exit records
    // or ~8 cgroup records; the burst is 8x that for each kind. The exits
    // are of processes in a tracked cgroup (only those are streamed).
    const EXITS: u64 = 420;
    const CGROUPS: u64 = 64;
    let cg = TestCgroup::create("overrun");
    let exits = |n: u64| {
        let script = format!(
            "echo $$ > {} && i=0; while [ $i -lt {n} ]; do /bin/true; i=$((i+1)); done",
            cg.procs_file(&cg.path).display()
        );
        let status = std::process::Command::new("sh").args(["-c", &script]).status().expect("sh");
        assert!(status.success());
    };
    exits(EXITS / 2);
    for i in 0..CGROUPS {
        let dir = cg.dir().join(format!("c{i}"));
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::remove_dir(&dir).expect("rmdir");
    }
    exits(EXITS / 2);
    drop(cg);

    // Drain until, for every kind, the kernel's and the reader's counts
    // agree and stay put (other activity on the machine may add events).
    let mut settled = None;
    for _ in 0..250 {
        let _ =
            tokio::time::timeout(Duration::from_millis(20), async { while pipeline.events.next().await.is_some() {} })
                .await;
        let now = snapshot(&pipeline);
        let stable = now.iter().zip(snapshot(&pipeline).iter()).all(|(a, b)| a.0 == b.0);
        let agree = now.iter().zip(before.iter()).all(|((k, r), (k0, r0))| r - r0 == k.0 - k0.0);
        if stable && agree {
            settled = Some(now);
            break;
        }
    }
    let now = settled.expect("kernel and reader counts never agreed");
    for (i, kind) in kinds.iter().enumerate() {
        let (((emitted, dropped), received), ((emitted0, dropped0), received0)) = (now[i], before[i]);
        let (emitted, dropped, delivered) = (emitted - emitted0, dropped - dropped0, received - received0);
        let produced = emitted + dropped;
        let generated = if *kind == EventKind::Exit { EXITS } else { CGROUPS + 1 };
        eprintln!("{kind:?}: generated {generated}, produced {produced}, delivered {delivered}, dropped {dropped}");
        assert!(produced >= generated, "{kind:?}: every event was produced: {produced} < {generated}");
        assert!(dropped > 0, "{kind:?}: a 4 KiB ring buffer must overflow during the burst");
        assert_eq!(delivered + dropped, produced, "{kind:?}: delivered + dropped == produced");
    }
    assert_eq!(pipeline.stats.channel_dropped(), 0);
    assert_eq!(pipeline.stats.decode_errors_total(), 0);
    pipeline.stop().await;
}

/// Set in the copy of this test binary that runs without CAP_SYS_RESOURCE.
const WITHOUT_SYS_RESOURCE: &str = "SANDWATCH_TEST_WITHOUT_SYS_RESOURCE";

/// Drops CAP_SYS_RESOURCE from this process's effective and permitted sets.
fn drop_sys_resource() {
    const CAP_SYS_RESOURCE: u32 = 24;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header { version: 0x2008_0522, pid: 0 };
    let mut data = [Data::default(); 2];
    // SAFETY: capget/capset with a v3 header and two data structs we own.
    unsafe {
        assert_eq!(libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()), 0, "capget");
        data[0].effective &= !(1 << CAP_SYS_RESOURCE);
        data[0].permitted &= !(1 << CAP_SYS_RESOURCE);
        assert_eq!(libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()), 0, "capset");
    }
}

/// Before Linux 5.11 eBPF maps count against RLIMIT_MEMLOCK: the agent
/// raises it, and without CAP_SYS_RESOURCE it refuses with one line
/// naming the capability; later kernels need neither. The test runs
/// itself again without the capability and reads what that copy says.
#[test]
fn memlock_is_raised_before_5_11_and_refused_without_cap_sys_resource() {
    require_root();
    let old_kernel = aya::util::KernelVersion::current().is_ok_and(|v| v < aya::util::KernelVersion::new(5, 11, 0));
    if std::env::var_os(WITHOUT_SYS_RESOURCE).is_some() {
        drop_sys_resource();
        // A limit below the maps, as 5.10's default 64 KiB is.
        let low = libc::rlimit { rlim_cur: 64 << 10, rlim_max: 64 << 10 };
        // SAFETY: setrlimit reads the struct we own.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &low) }, 0);
        match sandwatch::probes::Probes::load(&ProbeOptions::default()) {
            Ok(_) => println!("RESULT loaded"),
            Err(e) => println!("RESULT refused: {e}"),
        }
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args([
            "memlock_is_raised_before_5_11_and_refused_without_cap_sys_resource",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WITHOUT_SYS_RESOURCE, "1")
        .output()
        .expect("run the test binary again");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // libtest may print the test's name on the same line first.
    let result = text
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("no RESULT line: {text}"));
    if old_kernel {
        assert!(
            result.starts_with("refused: ")
                && result.contains("RLIMIT_MEMLOCK")
                && result.contains("CAP_SYS_RESOURCE")
                && !result.contains('\n'),
            "{result}"
        );
        // With the capability (this process) the same kernel loads.
        if let Err(e) = sandwatch::probes::Probes::load(&ProbeOptions::default()) {
            panic!("with CAP_SYS_RESOURCE the agent loads on Linux before 5.11: {e}");
        }
    } else {
        assert_eq!(result, "loaded", "Linux 5.11+ charges maps to the memory cgroup: no capability needed");
    }
}

/// Waits (up to 10 s) until `pid`'s comm is `comm`.
fn wait_for_comm(pid: u32, comm: &str) {
    let path = format!("/proc/{pid}/comm");
    for _ in 0..1000 {
        if std::fs::read_to_string(&path).is_ok_and(|c| c.trim_end() == comm) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("pid {pid} never became {comm:?}");
}
