//! The kernel's word that a file changed (inotify), read without waiting.
//! cgroup v2 raises a modification of `memory.events` whenever one of its
//! counts moves (the usage met `memory.max` or crossed `memory.high`, an
//! OOM): watching it tells which containers to read, instead of reading
//! them all. The queue is read once a tick: changes of one file that wait
//! unread are one event in it, so a container at its limit a thousand
//! times a second costs one.

use std::{
    ffi::CString,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    path::Path,
};

pub struct Inotify {
    fd: OwnedFd,
}

/// What the queue held since the last read.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// The watches whose files changed, with the name of the file for a
    /// watch on a directory (empty for a watch on the file itself): each
    /// once.
    pub watches: Vec<(i32, String)>,
    /// The kernel's queue overflowed: any watched file may have changed.
    pub overflowed: bool,
}

impl Inotify {
    pub fn new() -> std::io::Result<Self> {
        // SAFETY: inotify_init1 has no pointer arguments.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a new descriptor this value alone owns.
        Ok(Self { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// Watches `file` for modifications (a directory: of the files in
    /// it, each named); its watch descriptor.
    pub fn watch(&self, file: &Path) -> std::io::Result<i32> {
        let path = CString::new(file.as_os_str().as_encoded_bytes()).map_err(std::io::Error::other)?;
        // SAFETY: a NUL-terminated path for the call.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), path.as_ptr(), libc::IN_MODIFY) };
        if wd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(wd)
    }

    /// Stops watching (a watch whose file went is gone already: no error).
    pub fn unwatch(&self, wd: i32) {
        // SAFETY: no pointer arguments.
        unsafe { libc::inotify_rm_watch(self.fd.as_raw_fd(), wd) };
    }

    /// Everything queued now, without waiting.
    pub fn changes(&self) -> Changes {
        let mut changes = Changes::default();
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reads into a buffer we own, of its length.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            let Ok(n) = usize::try_from(n) else { break };
            if n == 0 {
                break;
            }
            parse(&buf[..n], &mut changes);
        }
        changes.watches.sort_unstable();
        changes.watches.dedup();
        changes
    }
}

/// The events in `bytes` (`struct inotify_event`s: wd, mask, cookie, len,
/// then `len` bytes of name, NUL-padded).
fn parse(bytes: &[u8], changes: &mut Changes) {
    const HEADER: usize = 16;
    let mut at = 0;
    while let Some(header) = bytes.get(at..at + HEADER) {
        let word = |i: usize| u32::from_ne_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
        let (wd, mask, len) = (word(0) as i32, word(4), word(12) as usize);
        if mask & libc::IN_Q_OVERFLOW != 0 {
            changes.overflowed = true;
        } else if mask & libc::IN_MODIFY != 0 {
            let name = bytes.get(at + HEADER..at + HEADER + len).unwrap_or(&[]);
            let name = name.split(|b| *b == 0).next().unwrap_or(&[]);
            changes.watches.push((wd, String::from_utf8_lossy(name).into_owned()));
        }
        at += HEADER + len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(wd: i32, mask: u32, name: &str) -> Vec<u8> {
        let len = if name.is_empty() { 0 } else { (name.len() + 1).next_multiple_of(16) };
        let mut e = Vec::new();
        for word in [wd as u32, mask, 0, len as u32] {
            e.extend_from_slice(&word.to_ne_bytes());
        }
        e.extend_from_slice(name.as_bytes());
        e.extend(std::iter::repeat_n(0u8, len - name.len()));
        e
    }

    #[test]
    fn events_are_read_by_their_watch_and_name_and_an_overflow_is_said() {
        let mut bytes = event(3, libc::IN_MODIFY, "");
        bytes.extend(event(5, libc::IN_IGNORED, "memory.events"));
        bytes.extend(event(-1, libc::IN_Q_OVERFLOW, ""));
        bytes.extend(event(4, libc::IN_MODIFY, "memory.max"));
        // A cut record is not read past.
        bytes.extend_from_slice(&[1, 2, 3]);
        let mut changes = Changes::default();
        parse(&bytes, &mut changes);
        assert_eq!(changes, Changes { watches: vec![(3, String::new()), (4, "memory.max".into())], overflowed: true });
    }

    #[test]
    fn a_file_changed_twice_before_the_read_is_one_change() {
        let dir = std::env::temp_dir().join(format!("sandwatch-inotify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::write(&a, "0").unwrap();
        std::fs::write(&b, "0").unwrap();
        let inotify = Inotify::new().unwrap();
        let (wa, wb) = (inotify.watch(&a).unwrap(), inotify.watch(&b).unwrap());
        assert_eq!(inotify.changes(), Changes::default(), "nothing yet");
        std::fs::write(&a, "1").unwrap();
        std::fs::write(&a, "2").unwrap();
        assert_eq!(inotify.changes().watches, [(wa, String::new())]);
        inotify.unwatch(wa);
        std::fs::write(&a, "3").unwrap();
        std::fs::write(&b, "1").unwrap();
        assert_eq!(inotify.changes().watches, [(wb, String::new())], "an unwatched file says nothing");
        // A watch on the directory names the file written.
        let wd = inotify.watch(&dir).unwrap();
        std::fs::write(&a, "4").unwrap();
        let changes = inotify.changes().watches;
        assert!(changes.contains(&(wd, "a".to_string())), "{changes:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
