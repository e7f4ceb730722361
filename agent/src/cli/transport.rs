//! The client's transport: HTTP/1.1 to an agent's `/events`, over its
//! unix socket or TCP, and the stream's lines as they arrive, each at most
//! [`MAX_LINE`] long. What the lines say is the table's
//! ([`super::table`]), which records to ask for the command's
//! ([`super::events`]).

use std::time::Duration;

use http_body_util::{BodyExt as _, Empty};
use hyper::{body::Bytes, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;

use crate::telemetry::server::NDJSON;

/// Why the client stopped: one line for the user.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Url(String),
    #[error("cannot reach the agent at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} is not a sandwatch agent: {why}")]
    NotSandwatch { url: String, why: String },
    #[error("the agent at {url} refused the stream: {message}")]
    Refused { url: String, message: String },
    #[error("the agent at {url} ended the stream (it stopped or restarted)")]
    Ended { url: String },
    #[error("lost the agent at {url}: {reason}")]
    Lost { url: String, reason: String },
    #[error("{url} sent a line longer than {MAX_LINE} bytes: no event record is that long")]
    LineTooLong { url: String },
}

/// The longest line the client buffers: a record is a few hundred bytes.
pub const MAX_LINE: usize = 64 * 1024;

/// The stream of an agent's records, line by line.
pub struct Lines {
    url: String,
    body: hyper::body::Incoming,
    /// What arrived after the last whole line.
    pending: Vec<u8>,
}

impl Lines {
    /// Connects to the agent at `url` and asks for `/events?{query}`; an
    /// answer that is not the stream is an error that says what it was.
    pub async fn open(url: &str, query: &str) -> Result<Self, ClientError> {
        let target = Target::parse(url)?;
        let unreachable = |reason: String| ClientError::Unreachable { url: url.to_string(), reason };
        let mut sender = tokio::time::timeout(Duration::from_secs(5), target.connect())
            .await
            .map_err(|_| unreachable("no answer within 5 s".into()))?
            .map_err(|e| unreachable(e.to_string()))?;
        let request = Request::get(target.events_path(query))
            .header(hyper::header::HOST, target.authority.as_str())
            .body(Empty::<Bytes>::new())
            .map_err(|e| ClientError::Url(format!("{url}: {e}")))?;
        let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
            .await
            .map_err(|_| unreachable("no answer within 10 s".into()))?
            .map_err(|e| unreachable(e.to_string()))?;
        let url = url.to_string();
        let status = response.status();
        let content_type =
            response.headers().get(hyper::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let body = response.into_body();
        if status != StatusCode::OK || !content_type.starts_with(NDJSON) {
            // At most a line's worth of an answer that is not the stream.
            let first = match http_body_util::Limited::new(body, MAX_LINE).collect().await {
                Ok(all) => {
                    let text = String::from_utf8_lossy(&all.to_bytes()).into_owned();
                    crate::text::visible(text.lines().next().unwrap_or("").trim()).into_owned()
                }
                Err(_) => String::new(),
            };
            let ours = content_type.starts_with("text/plain");
            return Err(match status {
                StatusCode::BAD_REQUEST | StatusCode::SERVICE_UNAVAILABLE if ours => {
                    ClientError::Refused { url, message: first }
                }
                StatusCode::OK => {
                    ClientError::NotSandwatch { url, why: format!("/events answered {content_type:?}, not {NDJSON}") }
                }
                _ => ClientError::NotSandwatch { url, why: format!("/events answered HTTP {status}") },
            });
        }
        Ok(Self { url, body, pending: Vec::new() })
    }

    /// The agent as the user named it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The next line that is not blank; `None` once the agent ended the
    /// stream.
    pub async fn next(&mut self) -> Result<Option<String>, ClientError> {
        loop {
            while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line[..end]);
                if !line.trim().is_empty() {
                    return Ok(Some(line.into_owned()));
                }
            }
            let frame = match self.body.frame().await {
                None => return Ok(None),
                Some(Ok(frame)) => frame,
                Some(Err(e)) => return Err(ClientError::Lost { url: self.url.clone(), reason: e.to_string() }),
            };
            let Ok(data) = frame.into_data() else { continue };
            self.pending.extend_from_slice(&data);
            if self.pending.len() > MAX_LINE && !self.pending[..MAX_LINE + 1].contains(&b'\n') {
                return Err(ClientError::LineTooLong { url: self.url.clone() });
            }
        }
    }
}

async fn handshake<S>(stream: S) -> Result<Sender, hyper::Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// Where the agent is: `host:port` and a path prefix (for proxies), or a
/// unix socket.
struct Target {
    authority: String,
    prefix: String,
    socket: Option<std::path::PathBuf>,
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

impl Target {
    async fn connect(&self) -> Result<Sender, Box<dyn std::error::Error + Send + Sync>> {
        Ok(match &self.socket {
            Some(path) => {
                handshake(tokio::net::UnixStream::connect(path).await.map_err(|e| {
                    if e.kind() == std::io::ErrorKind::PermissionDenied {
                        format!("{e} (the socket is root's: run as root, or through kubectl exec)")
                    } else {
                        e.to_string()
                    }
                })?)
                .await?
            }
            None => handshake(tokio::net::TcpStream::connect(self.authority.as_str()).await?).await?,
        })
    }

    fn parse(url: &str) -> Result<Self, ClientError> {
        if let Some(path) = url.strip_prefix("unix:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if !path.starts_with('/') {
                return Err(ClientError::Url(format!("{url:?}: a unix socket needs an absolute path")));
            }
            return Ok(Self { authority: "localhost".into(), prefix: String::new(), socket: Some(path.into()) });
        }
        let uri: Uri = url.parse().map_err(|_| {
            ClientError::Url(format!(
                "{url:?} is not a URL (e.g. unix:/run/sandwatch/events.sock, http://127.0.0.1:9433)"
            ))
        })?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => return Err(ClientError::Url(format!("{url}: only http:// is spoken, not {other}://"))),
            None => {
                return Err(ClientError::Url(format!(
                    "{url:?} has no scheme (e.g. unix:/run/sandwatch/events.sock, http://127.0.0.1:9433)"
                )))
            }
        }
        let host = uri.host().ok_or_else(|| ClientError::Url(format!("{url:?} names no host")))?;
        let port = uri.port_u16().unwrap_or(80);
        Ok(Self {
            authority: format!("{host}:{port}"),
            prefix: uri.path().trim_end_matches('/').to_string(),
            socket: None,
        })
    }

    /// The path of `/events?{query}` behind this target's prefix.
    fn events_path(&self, query: &str) -> String {
        format!("{}/events?{query}", self.prefix)
    }
}

/// `s` percent-encoded for a query value (commas kept: they separate kinds).
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b',' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_the_path_keeps_a_proxys_prefix() {
        assert!(matches!(Target::parse("https://x:1"), Err(ClientError::Url(l)) if l.contains("only http://")));
        assert!(matches!(Target::parse("127.0.0.1:9432"), Err(ClientError::Url(_))));
        let t = Target::parse("http://127.0.0.1:9432/proxy/").unwrap();
        assert_eq!(t.authority, "127.0.0.1:9432");
        assert_eq!(t.events_path("follow=0"), "/proxy/events?follow=0");
        assert_eq!(Target::parse("http://localhost").unwrap().authority, "localhost:80");
        let t = Target::parse("unix:/run/sandwatch/events.sock").unwrap();
        assert_eq!(t.socket.as_deref(), Some(std::path::Path::new("/run/sandwatch/events.sock")));
        assert_eq!(t.events_path("follow=0"), "/events?follow=0");
        assert!(matches!(Target::parse("unix:events.sock"), Err(ClientError::Url(_))));
        assert_eq!(encode("kube system,a&b"), "kube%20system,a%26b");
    }
}
