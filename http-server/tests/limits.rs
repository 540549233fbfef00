//! What a stalled, oversized or misbehaving client costs a server: a refusal or a timeout,
//! never the server. Each test runs a real server on a free port and talks raw HTTP to it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use drmas_http_server::{HttpServer, Limits, Method, Reply, Request, Service, StopHandle};

/// How long a connection may stall in these tests.
const IDLE: Duration = Duration::from_millis(500);

/// Echoes the body's length; `/sleep` takes twice the idle timeout, `/panic` panics, `/big`
/// streams a large answer.
struct Echo;

impl Service for Echo {
    fn answer(&self, request: Request) -> Reply {
        match (request.method, request.path.as_str()) {
            (Method::POST, "/echo") => {
                Reply::json(200, &serde_json::json!({ "bytes": request.body.len() }))
            }
            (Method::GET, "/health") => Reply::json(200, &serde_json::json!({})),
            (Method::GET, "/sleep") => {
                std::thread::sleep(IDLE * 2);
                Reply::json(200, &serde_json::json!({ "slept": true }))
            }
            (Method::GET, "/panic") => panic!("a service bug"),
            (Method::GET, "/big") => Reply::json_streamed(200, vec!["x".repeat(1000); 20_000]),
            _ => Reply::json(404, &serde_json::json!({ "error": "no such path" })),
        }
    }

    fn refusal(&self, status: u16, message: String) -> Reply {
        Reply::json(status, &serde_json::json!({ "error": message }))
    }
}

struct Running {
    addr: SocketAddr,
    stop: StopHandle,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl Running {
    fn start(max_requests: usize) -> Self {
        Self::start_with_idle_timeout(max_requests, IDLE)
    }

    fn start_with_idle_timeout(max_requests: usize, idle_timeout: Duration) -> Self {
        let server = HttpServer::bind("127.0.0.1:0").expect("bind");
        let addr = server.local_addr();
        let stop = server.stop_handle();
        let limits = Limits {
            max_body_bytes: 1 << 20,
            body_advice: "send less".to_owned(),
            idle_timeout,
            max_requests,
        };
        let thread = std::thread::spawn(move || server.serve(Arc::new(Echo), limits));
        Self {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        stream
    }

    /// Sends `request` on a new connection and returns the status and the answer's text.
    fn exchange(&self, request: &[u8]) -> (u16, String) {
        let mut stream = self.connect();
        stream.write_all(request).expect("send");
        read_answer(&mut stream)
    }

    fn get(&self, path: &str) -> (u16, String) {
        self.exchange(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the server thread").expect("serve");
        }
    }
}

/// Reads one answer (status line, headers, `Content-Length` bytes of body).
fn read_answer(stream: &mut TcpStream) -> (u16, String) {
    read_answer_pausing(stream, Duration::ZERO)
}

/// [`read_answer`], pausing for `pause` after each read of the body, as a slow client does.
fn read_answer_pausing(stream: &mut TcpStream, pause: Duration) -> (u16, String) {
    let mut bytes = Vec::new();
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        if let Some(end) = find(&bytes, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&bytes[..end]).to_string();
            let status = head[9..12].parse().expect("a status");
            let length: usize = head
                .lines()
                .find_map(|line| {
                    line.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_owned)
                })
                .and_then(|value| value.trim().parse().ok())
                .expect("a Content-Length");
            while bytes.len() < end + 4 + length {
                let read = stream.read(&mut buffer).expect("the body");
                assert!(read > 0, "the connection closed mid-body");
                bytes.extend_from_slice(&buffer[..read]);
                std::thread::sleep(pause);
            }
            return (
                status,
                String::from_utf8_lossy(&bytes[end + 4..end + 4 + length]).to_string(),
            );
        }
        let read = stream.read(&mut buffer).expect("an answer");
        assert!(
            read > 0,
            "the connection closed without an answer: {bytes:?}"
        );
        bytes.extend_from_slice(&buffer[..read]);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Whether the server closed `stream` within `within` (end of stream or reset), rather than
/// leaving it open.
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).expect("timeout");
    match stream.read(&mut [0u8; 1]) {
        Ok(read) => read == 0,
        Err(error) => !matches!(
            error.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

#[test]
fn a_body_announced_over_the_limit_is_refused_unread_and_the_server_goes_on() {
    let server = Running::start(2);
    // A terabyte announced, two bytes sent: the answer comes from the header alone.
    let (status, text) = server
        .exchange(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\n{}");
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("over 1048576 bytes; send less"), "{text}");
    // Any path, any method: the same.
    let (status, _) = server
        .exchange(b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999\r\n\r\n");
    assert_eq!(status, 413);
    let (status, text) = server.get("/health");
    assert_eq!((status, text.as_str()), (200, "{}"));
}

#[test]
fn a_chunked_body_past_the_limit_is_refused_and_one_within_it_is_read() {
    let server = Running::start(2);
    let chunk = "a".repeat(600_000);
    let two_chunks = format!(
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len(),
        chunk.len()
    );
    let (status, text) = server.exchange(two_chunks.as_bytes());
    assert_eq!(status, 413, "{text}");
    let one_chunk = format!(
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len()
    );
    let (status, text) = server.exchange(one_chunk.as_bytes());
    assert_eq!((status, text.as_str()), (200, "{\"bytes\":600000}"));
}

#[test]
fn clients_that_stall_hold_no_turn_and_are_dropped_after_the_idle_timeout() {
    // One turn only: a stalled body that held it would block the health check below.
    let server = Running::start(1);
    let mut stalled_bodies: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut stream = server.connect();
            stream
                .write_all(
                    b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"a\":",
                )
                .expect("send");
            stream
        })
        .collect();
    let mut stalled_heads: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut stream = server.connect();
            stream
                .write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\n")
                .expect("send");
            stream
        })
        .collect();
    let started = Instant::now();
    let (status, _) = server.get("/health");
    assert_eq!(status, 200);
    assert!(
        started.elapsed() < IDLE,
        "health waited {:?}",
        started.elapsed()
    );
    // A stalled body is told why; a stalled head's connection is closed.
    let (status, text) = read_answer(&mut stalled_bodies[0]);
    assert_eq!(status, 408, "{text}");
    assert!(text.contains("stalled"), "{text}");
    for stream in &mut stalled_heads {
        assert!(
            closed_within(stream, IDLE * 4),
            "a stalled head's connection stayed open"
        );
    }
}

#[test]
fn a_kept_alive_connection_left_idle_is_closed_and_a_long_answer_is_not_cut() {
    let server = Running::start(2);
    let mut stream = server.connect();
    stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("send");
    assert_eq!(read_answer(&mut stream).0, 200);
    assert!(
        closed_within(&mut stream, IDLE * 4),
        "an idle connection stayed open"
    );
    // An answer that takes longer than the idle timeout still arrives.
    let (status, text) = server.get("/sleep");
    assert_eq!((status, text.as_str()), (200, "{\"slept\":true}"));
}

#[test]
fn a_client_that_closes_its_sending_side_after_its_request_gets_the_answer() {
    let server = Running::start(1);
    let mut stream = server.connect();
    stream
        .write_all(b"GET /sleep HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("send");
    stream
        .shutdown(std::net::Shutdown::Write)
        .expect("half-close");
    assert_eq!(
        read_answer(&mut stream),
        (200, "{\"slept\":true}".to_owned())
    );
}

#[test]
fn a_client_that_never_reads_a_streamed_answer_gives_its_turn_back() {
    // One turn: the unread answer's writer holds it until the connection ends.
    let server = Running::start(1);
    let mut unread = server.connect();
    unread
        .write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("send");
    // Some of it arrives; then the client stops reading.
    let mut first = [0u8; 1024];
    assert!(unread.read(&mut first).expect("the head") > 0);
    assert!(String::from_utf8_lossy(&first).starts_with("HTTP/1.1 200"));
    // The kernel buffers fill, the write stalls past the idle timeout, the turn comes back.
    let started = Instant::now();
    let (status, _) = server.get("/health");
    assert_eq!(status, 200);
    assert!(
        started.elapsed() < IDLE * 10,
        "health waited {:?}",
        started.elapsed()
    );
    // A client that reads gets the whole answer, with its announced length.
    let (status, text) = server.get("/big");
    assert_eq!(status, 200);
    let parsed: Vec<String> = serde_json::from_str(&text).expect("JSON");
    assert_eq!(parsed.len(), 20_000);
    drop(unread);
}

#[test]
fn a_service_that_panics_answers_500_and_the_server_goes_on() {
    let server = Running::start(1);
    let (status, text) = server.get("/panic");
    assert_eq!(status, 500);
    assert!(text.contains("its log says why"), "{text}");
    assert_eq!(server.get("/health").0, 200);
}

#[test]
fn a_stopped_server_sends_the_answers_in_progress_whole_then_accepts_no_more() {
    let mut server = Running::start(2);
    let mut slow = server.connect();
    slow.write_all(b"GET /sleep HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("send");
    let mut big = server.connect();
    big.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("send");
    // Read slowly (64 KiB each 5 ms: 1.5 s for 20 MB), the streamed answer ends last.
    let big = std::thread::spawn(move || read_answer_pausing(&mut big, Duration::from_millis(5)));
    // Both answers are under way when the server is told to stop.
    std::thread::sleep(IDLE / 5);
    server.stop.stop();
    let serving = server.thread.take().expect("the server thread");

    assert_eq!(read_answer(&mut slow), (200, "{\"slept\":true}".to_owned()));
    let (status, text) = big.join().expect("the reader");
    assert_eq!(status, 200);
    let parsed: Vec<String> = serde_json::from_str(&text).expect("the whole answer");
    assert_eq!(parsed.len(), 20_000);
    serving.join().expect("the server thread").expect("serve");
    assert!(
        TcpStream::connect(server.addr).is_err(),
        "a stopped server still accepts connections"
    );
}

#[test]
fn a_stopped_server_closes_a_connection_that_never_sent_a_request_at_once() {
    let idle = Duration::from_secs(30);
    let mut server = Running::start_with_idle_timeout(1, idle);
    let mut silent = server.connect();
    let mut kept_alive = server.connect();
    kept_alive
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("send");
    assert_eq!(read_answer(&mut kept_alive).0, 200);
    // The accept loop has taken the silent connection by the time the other one was answered.
    let stopped = Instant::now();
    server.stop.stop();
    server
        .thread
        .take()
        .expect("the server thread")
        .join()
        .expect("the server thread")
        .expect("serve");
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "serve returned {:?} after the stop, waiting on a connection that sent nothing",
        stopped.elapsed()
    );
    assert!(closed_within(&mut silent, Duration::from_secs(1)));
    assert!(closed_within(&mut kept_alive, Duration::from_secs(1)));
}
