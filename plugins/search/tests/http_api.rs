//! The retrieval HTTP API on loopback: server and client end to end, malformed requests and
//! responses, an unreachable server, a server restarted while a search waits for it.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use drmas_search::dataset::{load_qa_jsonl, LoadOptions};
use drmas_search::retriever::bm25::{Bm25Options, Bm25Retriever};
use drmas_search::retriever::http::{HttpRetriever, HttpRetrieverConfig};
use drmas_search::retriever::query::QueryLimits;
use drmas_search::retriever::{Retriever, RetrieverError};
use drmas_search::server::{RetrievalServer, ServerConfig, ServerError, ServerHandle};
use serde_json::{json, Value};

/// A server on an ephemeral loopback port that stops when dropped.
struct Running {
    url: String,
    handle: ServerHandle,
    thread: Option<JoinHandle<Result<(), ServerError>>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.handle.stop();
        if let Some(thread) = self.thread.take() {
            thread.join().expect("server thread").expect("served");
        }
    }
}

fn serve(retriever: Arc<dyn Retriever>) -> Running {
    serve_with(
        retriever,
        ServerConfig {
            workers: 2,
            max_body_bytes: 4096,
            ..ServerConfig::default()
        },
    )
}

fn serve_with(retriever: Arc<dyn Retriever>, config: ServerConfig) -> Running {
    serve_at("127.0.0.1:0", retriever, config)
}

fn serve_at(address: &str, retriever: Arc<dyn Retriever>, config: ServerConfig) -> Running {
    let server = RetrievalServer::bind(address, retriever, config).expect("bind");
    let url = server.url();
    let handle = server.handle();
    let thread = std::thread::spawn(move || server.run());
    Running {
        url,
        handle,
        thread: Some(thread),
    }
}

/// Sends raw bytes, returns the status code and the JSON body.
fn raw_request(url: &str, request: &str) -> (u16, Value) {
    let addr = url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(request.as_bytes()).expect("send");
    stream.shutdown(Shutdown::Write).expect("shutdown");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let body = response.split("\r\n\r\n").nth(1).expect("body");
    (status, serde_json::from_str(body).expect("JSON body"))
}

fn post(url: &str, path: &str, body: &str) -> (u16, Value) {
    raw_request(
        url,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

#[test]
fn client_and_server_agree_with_direct_bm25() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bm25 = Arc::new(common::nq_bm25(&dir.path().join("index")));
    let running = serve(bm25.clone());
    let client = HttpRetriever::new(HttpRetrieverConfig::new(running.url.clone()));
    assert_eq!(client.endpoint(), format!("{}/retrieve", running.url));

    let tasks = load_qa_jsonl(
        &common::nq_dir().join("questions.jsonl"),
        &LoadOptions {
            limit: Some(50),
            ..LoadOptions::default()
        },
    )
    .expect("questions")
    .tasks;
    let queries: Vec<String> = tasks.iter().map(|t| t.question.clone()).collect();
    let direct = bm25.search(&queries, 5).expect("direct");
    let remote = client.search(&queries, 5).expect("remote");
    assert_eq!(remote, direct, "the HTTP round trip changes nothing");
    assert_eq!(remote[0][0].id, "nqo-0");
    assert_eq!(remote[0][0].title(), "List of Nobel laureates in Physics");

    // The endpoint URL form of Search-R1's configs works too.
    let by_endpoint = HttpRetriever::new(HttpRetrieverConfig::new(format!(
        "{}/retrieve",
        running.url
    )));
    assert_eq!(
        by_endpoint.search(&queries[..1], 5).expect("remote"),
        direct[..1]
    );
}

#[test]
fn the_wire_format_is_search_r1s() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bm25 = Arc::new(common::nq_bm25(&dir.path().join("index")));
    let running = serve(bm25.clone());
    let query = "who got the first nobel prize in physics";
    let expected = bm25.search_one(query, 2).expect("direct");

    let (status, body) = post(
        &running.url,
        "/retrieve",
        &json!({"queries": [query], "topk": 2, "return_scores": true}).to_string(),
    );
    assert_eq!(status, 200);
    let item = &body["result"][0][0];
    assert_eq!(item["document"]["id"], "nqo-0");
    assert_eq!(item["document"]["contents"], expected[0].contents);
    assert_eq!(
        item["score"].as_f64().map(|s| s as f32),
        Some(expected[0].score)
    );
    assert_eq!(body["result"][0].as_array().map(Vec::len), Some(2));

    // Without scores the documents come bare; without topk the default (3) applies.
    let (status, body) = post(
        &running.url,
        "/retrieve",
        &json!({"queries": [query, "hamlet"]}).to_string(),
    );
    assert_eq!(status, 200);
    assert_eq!(
        body["result"][0][0],
        json!({"id": "nqo-0", "contents": expected[0].contents})
    );
    assert_eq!(body["result"][0].as_array().map(Vec::len), Some(3));
    assert_eq!(body["result"].as_array().map(Vec::len), Some(2));

    let (status, body) = post(&running.url, "/retrieve", r#"{"queries": [], "topk": 0}"#);
    assert_eq!((status, body), (200, json!({"result": []})));

    let (status, body) = raw_request(
        &running.url,
        "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!((status, body), (200, json!({"status": "ok"})));
}

#[test]
fn the_server_returns_each_passage_contents_byte_for_byte() {
    let contents = [
        ("bare", "Bare title, no quotes\nzebra text"),
        (
            "spaces",
            "  \"Spaced\"  \n\tzebra\u{a0}with  odd\u{2003}whitespace\r\nand a CRLF line  ",
        ),
        (
            "unicode",
            "\"Ünïcödé — ☃\"\nzebra 東京 cafe\u{301} 🦓 \"quoted\" back\\slash",
        ),
        ("one-line", "zebra and nothing else"),
        ("quoted-only-left", "\"Half quoted\nzebra"),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let corpus = dir.path().join("corpus.jsonl");
    let lines: String = contents
        .iter()
        .map(|(id, contents)| format!("{}\n", json!({"id": id, "contents": contents})))
        .collect();
    std::fs::write(&corpus, lines).expect("write the corpus");
    let bm25 = Bm25Retriever::open_or_build(
        &corpus,
        &dir.path().join("index"),
        &Bm25Options::default(),
        &|_| {},
    )
    .expect("index");
    let running = serve(Arc::new(bm25));

    let (status, body) = post(
        &running.url,
        "/retrieve",
        &json!({"queries": ["zebra"], "topk": 10}).to_string(),
    );
    assert_eq!(status, 200, "{body}");
    let returned = body["result"][0].as_array().expect("one list");
    assert_eq!(returned.len(), contents.len());
    for document in returned {
        let id = document["id"].as_str().expect("id");
        let expected = contents.iter().find(|(i, _)| *i == id).expect("known id").1;
        assert_eq!(document["contents"], expected, "passage {id}");
    }

    // The client hands the same bytes on.
    let client = HttpRetriever::new(HttpRetrieverConfig::new(running.url.clone()));
    let hits = client.search(&["zebra".to_owned()], 10).expect("remote");
    for hit in &hits[0] {
        let expected = contents
            .iter()
            .find(|(i, _)| *i == hit.id)
            .expect("known id")
            .1;
        assert_eq!(hit.contents, expected, "passage {}", hit.id);
    }
}

#[test]
fn the_server_answers_malformed_requests_with_json_errors_and_keeps_serving() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bm25 = Arc::new(common::nq_bm25(&dir.path().join("index")));
    let running = serve(bm25);
    let bad_bodies = [
        ("not json", "malformed request"),
        ("{\"queries\": [\"a\"", "malformed request"),
        ("{\"topk\": 3}", "missing field `queries`"),
        ("{\"queries\": \"a\"}", "invalid type"),
        ("{\"queries\": [1, 2]}", "invalid type"),
        ("{\"queries\": [\"a\"], \"topk\": -1}", "invalid value"),
        ("{\"queries\": [\"a\"], \"topk\": \"3\"}", "invalid type"),
        (
            "{\"queries\": [\"a\"], \"return_scores\": \"yes\"}",
            "invalid type",
        ),
        ("{\"queries\": [\"a\"], \"topk\": 100000}", "over the limit"),
        ("[]", "malformed request"),
        ("", "malformed request"),
    ];
    for (body, expected) in bad_bodies {
        let (status, answer) = post(&running.url, "/retrieve", body);
        assert_eq!(status, 400, "{body:?} -> {answer}");
        let message = answer["error"].as_str().expect("error message");
        assert!(message.contains(expected), "{body:?} -> {message}");
    }
    let huge = json!({"queries": ["x".repeat(5000)]}).to_string();
    assert_eq!(post(&running.url, "/retrieve", &huge).0, 413);
    let (status, answer) = post(&running.url, "/search", "{}");
    assert_eq!(status, 404);
    assert!(
        answer["error"]
            .as_str()
            .is_some_and(|m| m.contains("POST /retrieve")),
        "{answer}"
    );
    let (status, _) = raw_request(
        &running.url,
        "GET /retrieve HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 405);

    // Still serving.
    let (status, body) = post(
        &running.url,
        "/retrieve",
        r#"{"queries": ["hamlet"], "topk": 1}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"][0].as_array().map(Vec::len), Some(1));
}

#[test]
fn requests_over_the_limits_are_refused_naming_the_limit_and_the_flag() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bm25 = common::nq_bm25(&dir.path().join("index")).with_query_limits(QueryLimits {
        max_bytes: 100,
        max_terms: 4,
        max_batch_terms: 10,
    });
    let running = serve_with(
        Arc::new(bm25),
        ServerConfig {
            workers: 2,
            max_top_k: 10,
            max_passages: 12,
            max_body_bytes: 4096,
            ..ServerConfig::default()
        },
    );
    let refused = |body: Value, status: u16, expected: &[&str]| {
        let (got, answer) = post(&running.url, "/retrieve", &body.to_string());
        let message = answer["error"].as_str().unwrap_or_default().to_owned();
        assert_eq!(got, status, "{body} -> {answer}");
        for part in expected {
            assert!(message.contains(part), "{body} -> {message}");
        }
    };
    refused(
        json!({"queries": ["hamlet", "x ".repeat(60)]}),
        400,
        &[
            "query 1 of the batch is refused: it is 120 bytes long, over the limit of 100 bytes",
            "--max-query-bytes",
        ],
    );
    refused(
        json!({"queries": ["nobel prize physics first winner"]}),
        400,
        &["more than 4 distinct terms", "--max-query-terms"],
    );
    refused(
        json!({"queries": ["nobel prize physics winner", "hamlet author play", "paris tower france eiffel"]}),
        413,
        &["more than 10 distinct terms together", "--max-batch-terms"],
    );
    refused(
        json!({"queries": ["a", "b", "c", "d", "e"], "topk": 3}),
        413,
        &[
            "asks for 15 passages (5 queries × topk 3), over the limit of 12 a request",
            "--max-passages",
        ],
    );
    refused(
        json!({"queries": ["a"], "topk": 11}),
        400,
        &["topk 11 is over the limit 10", "--max-topk"],
    );
    refused(
        json!({"queries": ["x".repeat(5000)]}),
        413,
        &["request body over 4096 bytes", "--max-body-bytes"],
    );

    // At the limits, served.
    let (status, body) = post(
        &running.url,
        "/retrieve",
        &json!({"queries": ["nobel prize physics", "hamlet author play", "paris tower", "rome"], "topk": 3})
            .to_string(),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"].as_array().map(Vec::len), Some(4));
}

/// A one-shot fake server answering every connection with `status` and `body`.
fn fake_server(status: u16, body: &'static str, connections: usize) -> (String, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let thread = std::thread::spawn(move || {
        for _ in 0..connections {
            let (mut stream, _) = listener.accept().expect("accept");
            let mut buffer = [0u8; 65536];
            // Read the request head and body (small), then answer.
            let _ = stream.read(&mut buffer).expect("read");
            let response = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(response.as_bytes()).expect("answer");
        }
    });
    (url, thread)
}

fn quick_client(url: &str) -> HttpRetriever {
    HttpRetriever::new(HttpRetrieverConfig {
        url: url.to_owned(),
        timeout: Duration::from_secs(2),
        max_tries: 2,
        retry_for: Duration::from_secs(30),
        initial_backoff: Duration::from_millis(10),
    })
}

#[test]
fn the_client_reports_malformed_responses() {
    let cases: [(&str, &str); 6] = [
        ("not json", "not JSON"),
        (r#"{"results": []}"#, "no \"result\" field"),
        (r#"{"result": [[], []]}"#, "2 result lists for 1 queries"),
        (
            r#"{"result": [[{"score": 1.0}]]}"#,
            "result[0][0] has no \"document\"",
        ),
        (
            r#"{"result": [[{"document": {"id": "x"}, "score": 1.0}]]}"#,
            "result[0][0].document has no string \"contents\"",
        ),
        (
            r#"{"result": [[{"document": {"id": "x", "contents": "t"}}]]}"#,
            "result[0][0] has no numeric \"score\"",
        ),
    ];
    for (body, expected) in cases {
        let (url, thread) = fake_server(200, body, 1);
        let error = quick_client(&url)
            .search(&["q".to_owned()], 3)
            .expect_err("malformed");
        thread.join().expect("fake server");
        assert!(
            matches!(error, RetrieverError::MalformedResponse { .. }),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains(expected) && message.contains(&url),
            "{message}"
        );
    }

    // A 4xx is final, reported with its body; a 5xx is retried, then reported.
    let (url, thread) = fake_server(400, r#"{"error": "bad"}"#, 1);
    let error = quick_client(&url)
        .search(&["q".to_owned()], 3)
        .expect_err("400");
    thread.join().expect("fake server");
    assert!(
        matches!(&error, RetrieverError::Status { status: 400, body, .. } if body.contains("bad")),
        "{error:?}"
    );
    let (url, thread) = fake_server(503, r#"{"error": "loading"}"#, 2);
    let error = quick_client(&url)
        .search(&["q".to_owned()], 3)
        .expect_err("503");
    thread.join().expect("fake server, asked twice");
    assert!(
        matches!(error, RetrieverError::Status { status: 503, .. }),
        "{error:?}"
    );
}

#[test]
fn an_unreachable_server_fails_fast_with_instructions() {
    // Bind then drop a listener: nothing listens on that port any more.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let client = HttpRetriever::new(HttpRetrieverConfig {
        url: url.clone(),
        timeout: Duration::from_millis(500),
        max_tries: 3,
        retry_for: Duration::from_secs(30),
        initial_backoff: Duration::from_millis(20),
    });
    let started = Instant::now();
    let error = client
        .search(&["q".to_owned()], 3)
        .expect_err("nobody listens");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        matches!(error, RetrieverError::Unreachable { tries: 3, .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.starts_with(&format!(
            "cannot reach retriever at {url}/retrieve after 3 tries: "
        )),
        "{message}"
    );
    assert!(message.contains("drmas-retriever serve"), "{message}");
}

#[test]
fn a_search_waits_for_a_restarted_server_and_gives_up_after_its_time() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bm25 = Arc::new(common::nq_bm25(&dir.path().join("index")));
    // A port nobody listens on yet: the server is "down".
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let config = HttpRetrieverConfig {
        url: url.clone(),
        timeout: Duration::from_secs(5),
        max_tries: 0,
        retry_for: Duration::from_secs(60),
        initial_backoff: Duration::from_millis(50),
    };
    let client = HttpRetriever::new(config.clone());
    assert!(client.probe().is_err(), "nobody listens yet");
    let query = vec!["who wrote the iliad".to_owned()];
    let waiting = std::thread::spawn({
        let query = query.clone();
        move || client.search(&query, 3)
    });
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !waiting.is_finished(),
        "the search gave up while the server was down"
    );
    let running = serve_at(
        &format!("127.0.0.1:{port}"),
        bm25.clone(),
        ServerConfig::default(),
    );
    let hits = waiting
        .join()
        .expect("search thread")
        .expect("answered once the server is back");
    assert_eq!(hits, bm25.search(&query, 3).expect("bm25"));
    HttpRetriever::new(config.clone())
        .probe()
        .expect("the probe reaches the server");
    drop(running);

    // Down for longer than `retry_for`: the error comes after about that long.
    let client = HttpRetriever::new(HttpRetrieverConfig {
        retry_for: Duration::from_millis(600),
        ..config
    });
    let started = Instant::now();
    let error = client.search(&query, 3).expect_err("down for good");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        matches!(error, RetrieverError::Unreachable { tries, .. } if tries > 1),
        "{error:?}"
    );
}
