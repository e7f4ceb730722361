//! A minimal HTTP/1.0 client for the agent's endpoints, a connection for a
//! client that reads slowly, and reading one series out of a Prometheus
//! text exposition.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use anyhow::Result;

/// A TCP connection to `addr` (IPv4) whose kernel receive buffer is
/// `bytes`, set before it connects (afterwards the window is agreed
/// already): a client that reads slowly, or not at all, backs up into the
/// agent's send buffer after a few kilobytes.
pub fn connect_small(addr: SocketAddr, bytes: libc::c_int) -> Result<TcpStream> {
    use std::os::fd::FromRawFd as _;
    let SocketAddr::V4(v4) = addr else { anyhow::bail!("{addr}: an IPv4 address expected") };
    // SAFETY: a new socket we own; setsockopt and connect on it with valid
    // pointers and sizes; it is closed on failure, else handed to
    // TcpStream, which closes it.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        anyhow::ensure!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let fail = |what: &str| {
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            anyhow::anyhow!("{what} {addr}: {e}")
        };
        let size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        if libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, (&bytes as *const libc::c_int).cast(), size) != 0 {
            return Err(fail("SO_RCVBUF for"));
        }
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from(*v4.ip()).to_be() },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::connect(fd, (&sin as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(fail("connect to"));
        }
        Ok(TcpStream::from_raw_fd(fd))
    }
}

/// GET `path` within 5 s; (status, body), or `None` if it did not answer.
pub fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    get_timeout(addr, path, Duration::from_secs(5))
}

/// GET `path` within `timeout` for connecting (at most 2 s) and for each read.
pub fn get_timeout(addr: SocketAddr, path: &str, timeout: Duration) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, timeout.min(Duration::from_secs(2))).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let status = resp.split_whitespace().nth(1)?.parse().ok()?;
    let body = resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// GET `path` over a unix socket, as [`get_timeout`] does over TCP.
pub fn get_unix(socket: &std::path::Path, path: &str, timeout: Duration) -> Option<(u16, String)> {
    let mut s = std::os::unix::net::UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let status = resp.split_whitespace().nth(1)?.parse().ok()?;
    let body = resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// Value of one exact series (`name{labels}`) in a text exposition.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_exact_series_is_read() {
        let text = "# HELP a_total x\na_total{k=\"v\"} 3\na_total{k=\"vv\"} 4\nb 1.5\n";
        assert_eq!(metric(text, "a_total{k=\"v\"}"), Some(3.0));
        assert_eq!(metric(text, "b"), Some(1.5));
        assert_eq!(metric(text, "a_total"), None, "a prefix is no series");
    }

    #[test]
    fn a_closed_port_is_no_answer() {
        let port = crate::free_port().unwrap();
        assert_eq!(get_timeout(([127, 0, 0, 1], port).into(), "/", Duration::from_millis(200)), None);
    }
}
