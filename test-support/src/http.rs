//! A minimal HTTP/1.0 client for the agent's endpoints, and reading one
//! series out of a Prometheus text exposition.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

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
