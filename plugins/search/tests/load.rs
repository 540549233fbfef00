//! The retrieval server under hostile load on loopback: while clients keep sending a query of a
//! megabyte of distinct corpus words and requests of 200 000 queries, each of those is refused
//! at once and normal questions keep their answers coming within a bound.
//!
//! Bounded: each client sends a fixed number of requests at most, over connections with
//! timeouts, and stops when the normal questions are done; the test takes a few seconds.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use drmas_search::corpus::read_corpus;
use drmas_search::dataset::{load_qa_jsonl, LoadOptions};
use drmas_search::server::{RetrievalServer, ServerConfig};
use serde_json::{json, Value};

/// Hostile clients, as many as the server has workers.
const HOSTILE_CLIENTS: usize = 4;
/// The most requests one hostile client sends.
const MAX_HOSTILE_REQUESTS: usize = 25;
/// Normal questions asked while the hostile clients run.
const NORMAL_QUESTIONS: usize = 40;
/// The bound on every answer, normal or refusal (generous: a debug build on a busy machine).
const ANSWER_BOUND: Duration = Duration::from_secs(2);

/// POSTs `body` to `/retrieve`; the status and the JSON answer.
fn post(addr: &str, body: &str) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .and_then(|()| stream.set_write_timeout(Some(Duration::from_secs(10))))
        .expect("timeouts");
    let head = format!(
        "POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body.as_bytes()))
        .expect("send");
    stream.shutdown(Shutdown::Write).expect("shutdown");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read");
    let response = String::from_utf8(response).expect("UTF-8");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let body = response.split("\r\n\r\n").nth(1).expect("body");
    (status, serde_json::from_str(body).expect("JSON body"))
}

/// The hostile request bodies: one query of a megabyte of distinct words of the corpus (each a
/// term of the index), and 200 000 one-word queries of 10 passages each.
fn hostile_bodies() -> Vec<String> {
    let passages = read_corpus(&common::nq_dir().join("corpus.jsonl")).expect("corpus");
    let words: BTreeSet<&str> = passages
        .iter()
        .flat_map(|p| p.contents.split_whitespace())
        .filter(|w| w.len() > 3 && w.chars().all(char::is_alphabetic))
        .collect();
    let mut query = String::new();
    for word in words.iter().cycle() {
        if query.len() >= 1 << 20 {
            break;
        }
        query.push_str(word);
        query.push(' ');
    }
    let queries = vec!["hamlet"; 200_000];
    vec![
        json!({"queries": [query], "topk": 3}).to_string(),
        json!({"queries": queries, "topk": 10}).to_string(),
    ]
}

#[test]
fn normal_queries_keep_answering_while_hostile_requests_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bm25 = common::nq_bm25(&dir.path().join("index"));
    let config = ServerConfig {
        workers: HOSTILE_CLIENTS,
        ..ServerConfig::default()
    };
    let server = RetrievalServer::bind("127.0.0.1:0", Arc::new(bm25), config).expect("bind");
    let addr = server.local_addr().to_string();
    let handle = server.handle();
    let questions: Vec<String> = load_qa_jsonl(
        &common::nq_dir().join("questions.jsonl"),
        &LoadOptions {
            limit: Some(NORMAL_QUESTIONS),
            ..LoadOptions::default()
        },
    )
    .expect("questions")
    .tasks
    .into_iter()
    .map(|task| task.question)
    .collect();
    let hostile = hostile_bodies();
    let normal_done = AtomicBool::new(false);

    std::thread::scope(|scope| {
        let served = scope.spawn(move || server.run());
        let clients: Vec<_> = (0..HOSTILE_CLIENTS)
            .map(|client| {
                let (addr, body, normal_done) = (&addr, &hostile[client % 2], &normal_done);
                scope.spawn(move || {
                    let mut refusals = Vec::new();
                    while !normal_done.load(Ordering::SeqCst)
                        && refusals.len() < MAX_HOSTILE_REQUESTS
                    {
                        let started = Instant::now();
                        let (status, answer) = post(addr, body);
                        refusals.push((status, answer, started.elapsed()));
                    }
                    refusals
                })
            })
            .collect();

        // Let the hostile clients get going, then ask.
        std::thread::sleep(Duration::from_millis(100));
        let mut slowest = Duration::ZERO;
        for question in &questions {
            let started = Instant::now();
            let (status, answer) = post(&addr, &json!({"queries": [question]}).to_string());
            let took = started.elapsed();
            slowest = slowest.max(took);
            assert_eq!(status, 200, "{question}: {answer}");
            assert_eq!(answer["result"][0].as_array().map(Vec::len), Some(3));
            assert!(took < ANSWER_BOUND, "{question} took {took:?}");
        }
        normal_done.store(true, Ordering::SeqCst);

        let mut refused = 0;
        for client in clients {
            for (status, answer, took) in client.join().expect("hostile client") {
                let message = answer["error"].as_str().unwrap_or_default();
                assert!(
                    (status == 400 && message.contains("--max-query-bytes"))
                        || (status == 413 && message.contains("--max-passages")),
                    "{status} {answer}"
                );
                assert!(took < ANSWER_BOUND, "a refusal took {took:?}");
                refused += 1;
            }
        }
        assert!(refused >= HOSTILE_CLIENTS, "{refused} hostile requests ran");
        println!(
            "{} questions, slowest {slowest:?}, beside {refused} hostile requests refused",
            questions.len()
        );
        handle.stop();
        served.join().expect("server thread").expect("served");
    });
}
