//! Connections: how many the server holds at once, and how long one may hold it without
//! moving. `max_concurrent_requests` bounds the work being done; these bounds stop clients
//! that do no work from holding the server instead: connections past `max_connections`
//! are answered 503 at once and closed, headers must arrive within `header_timeout_s`, and
//! a connection on which nothing moves for `idle_timeout_s` while no request of it is
//! being served (an idle keep-alive, or a response its client does not read) is closed.
//! A request's body has its own deadline, `body_timeout_s` (see [`deadline_body`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

/// Largest request head (request line and headers) a connection buffers; larger heads
/// are answered 431 by hyper. It also bounds each connection's read buffer.
pub const MAX_HEAD_BYTES: usize = 64 << 10;
/// Connections over the limit being answered 503 at once; past this many, accepting
/// waits (a flood must not buy itself a task per connection).
const MAX_REFUSING: usize = 64;
/// How long a refusal may take, reading the request and writing the answer, before the
/// connection is dropped.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(2);
/// How long open connections may take to finish their requests after Ctrl-C.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Pause after a failed accept (out of file descriptors, say) so the loop does not spin.
const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The bounds of [`serve_connections`].
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// Connections held at once.
    pub max_connections: usize,
    /// Time from a connection's first byte of a request head to its end.
    pub header_timeout: Duration,
    /// Time a connection may go without a byte read or written while none of its
    /// requests is being served.
    pub idle_timeout: Duration,
}

/// Serves `router` on `listener` until `shutdown` completes, within `limits`; then stops
/// accepting and gives open connections [`SHUTDOWN_GRACE`] to finish.
pub async fn serve_connections(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(_) => {
                    tokio::time::sleep(ACCEPT_RETRY_PAUSE).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // While MAX_REFUSING refusals are under way, accepting waits: the kernel's
            // backlog holds the next connections (a closed connection would be a reset).
            if let Ok(refusal) = refusing.clone().acquire_owned().await {
                tokio::spawn(refuse(stream, limits.max_connections, refusal));
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let serving = Arc::new(AtomicUsize::new(0));
        let io = TokioIo::new(GuardedStream::new(
            stream,
            slot,
            limits.idle_timeout,
            serving.clone(),
        ));
        let router = router.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
            let busy = Busy::enter(&serving);
            let has_body = !http_body::Body::is_end_stream(request.body());
            let response = router.clone().oneshot(request.map(Body::new));
            async move {
                let mut response = response.await;
                drop(busy);
                // A refusal may leave the body unread, and then hyper closes the
                // connection: say so, or the client reuses it and finds it closed.
                if let Ok(response) = &mut response {
                    if has_body && !response.status().is_success() {
                        response.headers_mut().insert(
                            axum::http::header::CONNECTION,
                            axum::http::HeaderValue::from_static("close"),
                        );
                    }
                }
                response
            }
        });
        let connection = graceful.watch(builder.serve_connection(io, service).into_owned());
        tokio::spawn(async move {
            // A connection's end (closed, reset, timed out) is the client's business.
            let _ = connection.await;
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await;
}

/// Answers a connection over the limit with 503 and `Retry-After`, then closes it. The
/// request is read first (its head and up to [`MAX_REFUSED_BODY_BYTES`] of body) and the
/// close waits for the client's: a server that closes with unread bytes resets the
/// connection, and the client would see a broken pipe instead of the answer.
async fn refuse(mut stream: TcpStream, max_connections: usize, _refusal: OwnedSemaphorePermit) {
    let body = format!(
        "{{\"code\":\"overloaded\",\"message\":\"{max_connections} connections are open (the limit); \
         retry later\",\"retryable\":true}}"
    );
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    // A client that sends nothing is answered all the same, a little later.
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT / 4, skip_request(&mut stream)).await;
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        // Until the client closes: whatever else it sends is dropped.
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<(), io::Error>(())
    })
    .await;
}

/// Most body bytes of a refused request read and dropped before the refusal.
const MAX_REFUSED_BODY_BYTES: usize = 1 << 20;

/// Reads one request head and its `content-length` body (at most
/// [`MAX_REFUSED_BODY_BYTES`] of it), dropping them.
async fn skip_request(stream: &mut TcpStream) -> io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        if head.len() > MAX_HEAD_BYTES {
            return Ok(());
        }
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..read]);
    };
    let text = String::from_utf8_lossy(&head[..head_end]).to_ascii_lowercase();
    let length = text
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse::<usize>().ok())
        .unwrap_or(0)
        .min(MAX_REFUSED_BODY_BYTES);
    let mut left = length.saturating_sub(head.len() - head_end);
    while left > 0 {
        let read = stream.read(&mut chunk[..left.min(4096)]).await?;
        if read == 0 {
            break;
        }
        left -= read;
    }
    Ok(())
}

/// Counts a connection's requests being served while alive.
struct Busy(Arc<AtomicUsize>);

impl Busy {
    fn enter(serving: &Arc<AtomicUsize>) -> Busy {
        serving.fetch_add(1, Ordering::SeqCst);
        Busy(serving.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A connection's stream, holding its slot, that fails with `TimedOut` once nothing has
/// moved on it for the idle timeout while none of its requests is being served.
struct GuardedStream {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    idle_timeout: Duration,
    idle: Pin<Box<Sleep>>,
    serving: Arc<AtomicUsize>,
}

impl GuardedStream {
    fn new(
        stream: TcpStream,
        slot: OwnedSemaphorePermit,
        idle_timeout: Duration,
        serving: Arc<AtomicUsize>,
    ) -> GuardedStream {
        GuardedStream {
            stream,
            _slot: slot,
            idle_timeout,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            serving,
        }
    }

    fn moved(&mut self) {
        let deadline = Instant::now() + self.idle_timeout;
        self.idle.as_mut().reset(deadline);
    }

    /// After an operation that could not go on: an error once the connection has been
    /// idle too long, else pending (the timer wakes the task when it fires).
    fn check_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        while self.idle.as_mut().poll(cx).is_ready() {
            if self.serving.load(Ordering::SeqCst) == 0 {
                return Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection idle past idle_timeout_s",
                ));
            }
            // A request is being served: waiting on our own work is not idling.
            self.moved();
        }
        Poll::Pending
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.stream).poll_read(cx, buf) {
            Poll::Ready(result) => {
                self.moved();
                Poll::Ready(result)
            }
            Poll::Pending => self.check_idle(cx).map(Err),
        }
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.stream).poll_write(cx, buf) {
            Poll::Ready(result) => {
                self.moved();
                Poll::Ready(result)
            }
            Poll::Pending => self.check_idle(cx).map(Err),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.stream).poll_write_vectored(cx, bufs) {
            Poll::Ready(result) => {
                self.moved();
                Poll::Ready(result)
            }
            Poll::Pending => self.check_idle(cx).map(Err),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// A request body that fails once `deadline` has passed before it has all arrived, so a
/// client sending a byte a second cannot hold a request slot for long.
pub struct DeadlineBody {
    body: Body,
    deadline: Pin<Box<Sleep>>,
    timeout: Duration,
}

/// The error a [`DeadlineBody`] fails with; `error.rs` recognizes it to answer 408.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive whole within {0:?} (body_timeout_s)")]
pub struct BodyDeadlinePassed(pub Duration);

/// `body`, failing after `timeout` from now.
pub fn deadline_body(body: Body, timeout: Duration) -> Body {
    Body::new(DeadlineBody {
        body,
        deadline: Box::pin(tokio::time::sleep(timeout)),
        timeout,
    })
}

impl http_body::Body for DeadlineBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.body).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(axum::Error::new(BodyDeadlinePassed(
                self.timeout,
            )))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A request served for longer than the idle timeout is not idling: its answer arrives.
    #[tokio::test]
    async fn a_request_served_past_the_idle_timeout_is_answered() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let router = Router::new().route(
            "/slow",
            axum::routing::get(|| async {
                tokio::time::sleep(Duration::from_millis(2500)).await;
                "done"
            }),
        );
        let limits = ConnectionLimits {
            max_connections: 4,
            header_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_connections(listener, router, limits, async {
            let _ = stop_rx.await;
        }));
        let mut stream = TcpStream::connect(address).await.expect("connect");
        stream
            .write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("send");
        let mut answer = Vec::new();
        let mut chunk = [0u8; 1024];
        while !String::from_utf8_lossy(&answer).ends_with("done") {
            let read = stream.read(&mut chunk).await.expect("read");
            assert!(read > 0, "closed before the answer: {answer:?}");
            answer.extend_from_slice(&chunk[..read]);
        }
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
        // Then, idle, the connection is closed.
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .expect("an idle connection was not closed");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        let _ = stop_tx.send(());
        server.await.expect("server task");
    }
}
