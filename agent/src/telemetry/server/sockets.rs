//! The server's sockets: where a listener listens (`HOST:PORT` or
//! `unix:PATH`), binding before anything loads (a unix socket root's
//! only, a stale one replaced, a live one refused), and the connections
//! accepted, each with a fixed kernel send buffer.

use std::{
    fmt,
    net::SocketAddr,
    path::PathBuf,
    pin::Pin,
    task::{Context, Poll},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpStream, UnixStream},
};

use super::{ServerError, Settings};

/// Where a listener listens: `HOST:PORT`, or `unix:PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl Address {
    pub fn parse(text: &str) -> Result<Self, String> {
        if let Some(path) = text.strip_prefix("unix:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if !path.starts_with('/') {
                return Err(format!(
                    "{text:?}: a unix socket needs an absolute path (unix:/run/sandwatch/events.sock)"
                ));
            }
            return Ok(Address::Unix(PathBuf::from(path)));
        }
        text.parse::<SocketAddr>()
            .map(Address::Tcp)
            .map_err(|_| format!("{text:?} is neither HOST:PORT (e.g. 127.0.0.1:9433) nor unix:PATH"))
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Tcp(a) => write!(f, "{a}"),
            Address::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// A socket bound, not served yet.
pub enum Bound {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener, SocketFile),
}

/// A unix socket's file, removed when the server is done with it.
pub struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Bound {
    pub fn bind(address: &Address) -> Result<Self, ServerError> {
        let bind_error = |error| ServerError::Bind { address: address.to_string(), error };
        match address {
            Address::Tcp(a) => std::net::TcpListener::bind(a).map(Bound::Tcp).map_err(bind_error),
            Address::Unix(path) => {
                use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(bind_error)?;
                }
                if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
                    if std::os::unix::net::UnixStream::connect(path).is_ok() {
                        return Err(ServerError::InUse(address.to_string()));
                    }
                    // Left by an agent that did not stop cleanly.
                    std::fs::remove_file(path).map_err(bind_error)?;
                }
                let listener = std::os::unix::net::UnixListener::bind(path).map_err(bind_error)?;
                let file = SocketFile(path.clone());
                // Root only: its records name every namespace's pods.
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bind_error)?;
                Ok(Bound::Unix(listener, file))
            }
        }
    }

    /// Where clients reach it, for the log.
    pub fn describe(&self) -> String {
        match self {
            Bound::Tcp(l) => l.local_addr().map_or_else(|_| "?".to_string(), |a| a.to_string()),
            Bound::Unix(_, file) => format!("unix:{}", file.0.display()),
        }
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Bound::Tcp(l) => l.local_addr().ok(),
            Bound::Unix(..) => None,
        }
    }
}

/// Both listeners, bound before anything loads (a port in use is an error
/// at start), served once the agent is up.
pub struct Listeners {
    pub metrics: Bound,
    pub events: Option<Bound>,
}

impl Listeners {
    pub fn bind(settings: &Settings) -> Result<Self, ServerError> {
        let metrics = Bound::bind(&Address::Tcp(settings.metrics))?;
        let events = settings.events.as_ref().map(Bound::bind).transpose()?;
        Ok(Self { metrics, events })
    }
}

/// A listening socket in the server's runtime (a unix socket's file goes
/// with it).
pub(super) enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, #[allow(dead_code)] SocketFile),
}

impl Listener {
    pub(super) fn from_bound(bound: Bound) -> std::io::Result<Self> {
        match bound {
            Bound::Tcp(l) => {
                l.set_nonblocking(true)?;
                Ok(Listener::Tcp(tokio::net::TcpListener::from_std(l)?))
            }
            Bound::Unix(l, file) => {
                l.set_nonblocking(true)?;
                Ok(Listener::Unix(tokio::net::UnixListener::from_std(l)?, file))
            }
        }
    }

    pub(super) async fn accept(&self) -> std::io::Result<Stream> {
        match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept().await?;
                limit_send_buffer(&s);
                Ok(Stream::Tcp(s))
            }
            Listener::Unix(l, _) => {
                let (s, _) = l.accept().await?;
                limit_send_buffer(&s);
                Ok(Stream::Unix(s))
            }
        }
    }
}

/// A connection's socket.
pub(super) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// The kernel's send buffer of a connection: fixed rather than
/// autotuned (up to `tcp_wmem`'s 4 MiB), so that stuck clients of
/// `/events` cannot pile megabytes of socket memory onto the agent's
/// memory cgroup; a scrape of /metrics only takes a few more writes.
const SEND_BUFFER: libc::c_int = 64 * 1024;

fn limit_send_buffer(socket: &impl std::os::fd::AsRawFd) {
    let size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: setsockopt on a socket we own, with a valid int and its size.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&SEND_BUFFER as *const libc::c_int).cast(),
            size,
        )
    };
    if rc != 0 {
        log::debug!("cannot set SO_SNDBUF: {}", std::io::Error::last_os_error());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_a_port_or_a_unix_path_and_nothing_else() {
        assert_eq!(Address::parse("127.0.0.1:9433"), Ok(Address::Tcp(([127, 0, 0, 1], 9433).into())));
        assert_eq!(
            Address::parse("unix:/run/sandwatch/events.sock"),
            Ok(Address::Unix(PathBuf::from("/run/sandwatch/events.sock")))
        );
        assert_eq!(Address::parse("unix:///run/x.sock"), Ok(Address::Unix(PathBuf::from("/run/x.sock"))));
        for bad in ["unix:relative.sock", "localhost", "http://127.0.0.1:9433", ""] {
            let e = Address::parse(bad).expect_err(bad);
            assert!(!e.contains('\n'), "{e}");
        }
        assert_eq!(Address::parse("unix:/a/b").map(|a| a.to_string()), Ok("unix:/a/b".to_string()));
    }

    /// Guards: the OS error said twice, once by the message and once as
    /// its source, in the agent's one-line error.
    #[test]
    fn a_socket_that_cannot_be_made_is_one_line_saying_why_once() {
        let file = std::env::temp_dir().join(format!("sandwatch-not-a-dir-{}", std::process::id()));
        std::fs::write(&file, "").unwrap();
        let address = Address::Unix(file.join("events.sock"));
        let Err(e) = Bound::bind(&address) else { panic!("bound below a file") };
        let line = crate::one_line(&anyhow::Error::from(e));
        std::fs::remove_file(&file).unwrap();
        assert!(line.starts_with(&format!("cannot listen on {address}: ")), "{line}");
        let os = line.rsplit(": ").next().unwrap();
        assert_eq!(line.matches(os).count(), 1, "{line}");
    }
}
