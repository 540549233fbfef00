//! [`TensorBoardLog`]: the run's metrics as TensorBoard scalars (`[run] tensorboard = true`),
//! in `RUN_DIR/tensorboard/`, one scalar per metric key at the iteration as its step, so that
//! `tensorboard --logdir RUN_DIR` (or a folder of runs) plots every metric the run records.
//!
//! `metrics.jsonl` stays the record: opening the log writes a new event file holding every line
//! the metrics file has so far (a resumed run's file is truncated to its checkpoint and amended
//! first), replacing the event files of earlier processes, so the scalars never hold the
//! iterations a resumed run redid twice. Each replayed iteration keeps the wall time the earlier
//! files gave it, so TensorBoard's time axes stay true across restarts. The format is TensorFlow's: TFRecord framing (length,
//! masked CRC-32C of the length, data, masked CRC-32C of the data) around `Event` protocol
//! buffers, written here by hand for the three fields a scalar needs.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde_json::Value;

use super::Metrics;

/// The folder of event files inside the run folder.
const TENSORBOARD_DIR: &str = "tensorboard";

/// What every event file name holds, for TensorBoard and for finding ours again.
const EVENT_FILE_MARK: &str = "tfevents";

/// The first event of every file: the format's version.
const FILE_VERSION: &str = "brain.Event:2";

/// Event files of the run's metrics, written and flushed as each iteration ends.
pub struct TensorBoardLog {
    path: PathBuf,
    writer: BufWriter<File>,
}

impl TensorBoardLog {
    /// Starts a new event file in `run_dir/tensorboard/` holding every record of
    /// `run_dir/metrics.jsonl`, after removing the event files earlier processes wrote there.
    pub fn open(run_dir: &Path) -> anyhow::Result<Self> {
        let dir = run_dir.join(TENSORBOARD_DIR);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let written_at = earlier_wall_times(&dir);
        remove_event_files(&dir)?;
        let now = wall_time();
        let path = dir.join(format!(
            "events.out.{EVENT_FILE_MARK}.{:010}.drmas.{}",
            now as u64,
            std::process::id()
        ));
        let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let mut log = Self {
            path,
            writer: BufWriter::new(file),
        };
        log.append(&version_event(now))?;
        let metrics_path = run_dir.join("metrics.jsonl");
        if let Ok(text) = std::fs::read_to_string(&metrics_path) {
            for line in text.lines() {
                if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(line) {
                    let time = written_at.get(&step_of(&fields)).copied().unwrap_or(now);
                    log.append(&scalars_event(time, &fields))?;
                }
            }
        }
        log.flush()?;
        Ok(log)
    }

    /// Appends `metrics`' values as scalars at its iteration and flushes them to disk.
    pub fn write(&mut self, metrics: &Metrics) -> anyhow::Result<()> {
        self.append(&scalars_event(wall_time(), metrics.fields()))?;
        self.flush()
    }

    /// Where the event file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn append(&mut self, event: &[u8]) -> anyhow::Result<()> {
        self.writer
            .write_all(&record(event))
            .with_context(|| format!("writing {}", self.path.display()))
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        self.writer
            .flush()
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

/// The wall time of each step's scalars in the event files of `dir`, read in name order (the
/// time comes first in a name, so a later file's time wins). A file that cannot be read, or its
/// rest from a torn or corrupt record on, is skipped: the times are a nicety.
fn earlier_wall_times(dir: &Path) -> BTreeMap<i64, f64> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .contains(EVENT_FILE_MARK)
        })
        .map(|entry| entry.path())
        .collect();
    files.sort();
    let mut times = BTreeMap::new();
    for file in files {
        if let Ok(bytes) = std::fs::read(&file) {
            note_wall_times(&bytes, &mut times);
        }
    }
    times
}

/// Adds the wall time of each scalar event of the event file `bytes` to `times`, by step, up
/// to its first torn or corrupt record.
fn note_wall_times(bytes: &[u8], times: &mut BTreeMap<i64, f64>) {
    let mut rest = bytes;
    while let Some((event, after)) = next_record(rest) {
        rest = after;
        let (mut time, mut step, mut scalars) = (None, 0, false);
        for (field, value) in fields(event) {
            match (field, value) {
                (1, FieldValue::Fixed64(bits)) => time = Some(f64::from_bits(bits)),
                (2, FieldValue::Varint(value)) => step = value as i64,
                (5, FieldValue::LengthDelimited) => scalars = true,
                _ => {}
            }
        }
        if let Some(time) = time.filter(|_| scalars) {
            times.insert(step, time);
        }
    }
}

/// The first record of `bytes` and what follows it, if it is whole and its CRCs hold.
fn next_record(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let length_bytes = bytes.get(..8)?;
    let length_crc = u32::from_le_bytes(bytes.get(8..12)?.try_into().ok()?);
    let length = usize::try_from(u64::from_le_bytes(length_bytes.try_into().ok()?)).ok()?;
    let data = bytes.get(12..12usize.checked_add(length)?)?;
    let data_crc_at = 12 + length;
    let data_crc = u32::from_le_bytes(bytes.get(data_crc_at..data_crc_at + 4)?.try_into().ok()?);
    (length_crc == masked_crc(length_bytes) && data_crc == masked_crc(data))
        .then(|| (data, &bytes[data_crc_at + 4..]))
}

/// A protocol-buffer field's value, for [`fields`].
enum FieldValue {
    Varint(u64),
    Fixed64(u64),
    LengthDelimited,
    Fixed32,
}

/// The fields of a protocol-buffer message, by number, up to the first malformed one.
fn fields(mut message: &[u8]) -> Vec<(u64, FieldValue)> {
    fn read_varint(bytes: &mut &[u8]) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = bytes.split_first()?;
            *bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Some(value);
            }
        }
        None
    }
    fn take<'a>(bytes: &mut &'a [u8], count: usize) -> Option<&'a [u8]> {
        let taken = bytes.get(..count)?;
        *bytes = &bytes[count..];
        Some(taken)
    }
    let mut found = Vec::new();
    while !message.is_empty() {
        let Some(key) = read_varint(&mut message) else {
            break;
        };
        let value = match key & 7 {
            0 => read_varint(&mut message).map(FieldValue::Varint),
            1 => take(&mut message, 8)
                .and_then(|bytes| bytes.try_into().ok())
                .map(|bytes| FieldValue::Fixed64(u64::from_le_bytes(bytes))),
            2 => read_varint(&mut message)
                .and_then(|length| usize::try_from(length).ok())
                .and_then(|length| take(&mut message, length))
                .map(|_| FieldValue::LengthDelimited),
            5 => take(&mut message, 4).map(|_| FieldValue::Fixed32),
            _ => None,
        };
        let Some(value) = value else {
            break;
        };
        found.push((key >> 3, value));
    }
    found
}

/// Removes the event files in `dir` (files whose names hold [`EVENT_FILE_MARK`]).
fn remove_event_files(dir: &Path) -> anyhow::Result<()> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let is_event_file = entry
            .file_name()
            .to_string_lossy()
            .contains(EVENT_FILE_MARK)
            && entry.file_type().is_ok_and(|kind| kind.is_file());
        if is_event_file {
            std::fs::remove_file(entry.path())
                .with_context(|| format!("removing {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Seconds since the Unix epoch.
fn wall_time() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

/// `Event { wall_time, file_version }`.
fn version_event(wall_time: f64) -> Vec<u8> {
    let mut event = Vec::new();
    event_head(&mut event, wall_time, 0);
    length_delimited(&mut event, 3, FILE_VERSION.as_bytes());
    event
}

/// `Event { wall_time, step: iteration, summary }` with one `simple_value` per finite number of
/// `fields` but the iteration.
fn scalars_event(wall_time: f64, fields: &serde_json::Map<String, Value>) -> Vec<u8> {
    let step = step_of(fields);
    let mut summary = Vec::new();
    for (tag, value) in fields {
        let Some(number) = value.as_f64().filter(|_| tag != "iteration") else {
            continue;
        };
        let mut entry = Vec::new();
        length_delimited(&mut entry, 1, tag.as_bytes());
        entry.push(key(2, WIRE_FIXED32));
        entry.extend_from_slice(&(number as f32).to_le_bytes());
        length_delimited(&mut summary, 1, &entry);
    }
    let mut event = Vec::new();
    event_head(&mut event, wall_time, step);
    length_delimited(&mut event, 5, &summary);
    event
}

/// The step of a metrics record: its iteration.
fn step_of(fields: &serde_json::Map<String, Value>) -> i64 {
    fields.get("iteration").and_then(Value::as_i64).unwrap_or(0)
}

/// An event's `wall_time` (field 1) and `step` (field 2, left out when 0 as proto3 does).
fn event_head(event: &mut Vec<u8>, wall_time: f64, step: i64) {
    event.push(key(1, WIRE_FIXED64));
    event.extend_from_slice(&wall_time.to_le_bytes());
    if step != 0 {
        event.push(key(2, WIRE_VARINT));
        varint(event, step as u64);
    }
}

const WIRE_VARINT: u8 = 0;
const WIRE_FIXED64: u8 = 1;
const WIRE_LENGTH_DELIMITED: u8 = 2;
const WIRE_FIXED32: u8 = 5;

/// A field's key byte (field numbers below 16).
fn key(field: u8, wire: u8) -> u8 {
    field << 3 | wire
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn length_delimited(out: &mut Vec<u8>, field: u8, bytes: &[u8]) {
    out.push(key(field, WIRE_LENGTH_DELIMITED));
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// One TFRecord: the data's length (u64, little-endian), its masked CRC, the data, the data's
/// masked CRC.
fn record(data: &[u8]) -> Vec<u8> {
    let length = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&length);
    out.extend_from_slice(&masked_crc(&length).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// TFRecord's masked CRC-32C: rotated right by 15 bits, plus a constant.
fn masked_crc(data: &[u8]) -> u32 {
    crc32c(data).rotate_right(15).wrapping_add(0xa282_ead8)
}

/// CRC-32C (Castagnoli), as TFRecord checksums its records.
fn crc32c(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut crc = i as u32;
            let mut bit = 0;
            while bit < 8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0x82f6_3b78
                } else {
                    crc >> 1
                };
                bit += 1;
            }
            table[i] = crc;
            i += 1;
        }
        table
    };
    !data.iter().fold(!0u32, |crc, &byte| {
        TABLE[((crc ^ u32::from(byte)) & 0xff) as usize] ^ (crc >> 8)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events as TensorBoard's own writer frames them: `RecordWriter` around
    /// `event_pb2.Event(...).SerializeToString()` (tensorboard 2.20.0) for the version event at
    /// 1764979200.5, iteration 0 with `eval/avg@2` 0.03125 at 1764979201.25 (step left out),
    /// and iteration 300 with `grad_norm/agent/solver` 1.6537243425825694 and `reward/mean` 0.0
    /// at 1764979202.0.
    const TENSORBOARD_BYTES: &str = "1800000000000000a37f4b220900002080dc4cda411a0d627261696e2e4\
        576656e743a329621a1161e00000000000000d9dc12320900005080dc4cda412a130a110a0a6576616c2f617\
        6674032150000003d717ac83b410000000000000000a9c2ab0900008080dc4cda4110ac022a330a1d0a16677\
        261645f6e6f726d2f6167656e742f736f6c766572153dadd33f0a120a0b7265776172642f6d65616e1500000\
        000485540c5";

    fn fields(json: Value) -> serde_json::Map<String, Value> {
        match json {
            Value::Object(fields) => fields,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn events_are_byte_for_byte_what_tensorboards_writer_writes() {
        let mut written = record(&version_event(1_764_979_200.5));
        written.extend(record(&scalars_event(
            1_764_979_201.25,
            &fields(serde_json::json!({ "iteration": 0, "eval/avg@2": 0.03125 })),
        )));
        written.extend(record(&scalars_event(
            1_764_979_202.0,
            &fields(serde_json::json!({
                "iteration": 300,
                "grad_norm/agent/solver": 1.653_724_342_582_569_4,
                "reward/mean": 0.0,
                "time/missing": null,
            })),
        )));
        let hex: String = written.iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(hex, TENSORBOARD_BYTES);
    }

    /// The records of an event file, every one whole with its CRCs holding.
    fn read_records(bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut records = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let (data, after) = next_record(rest).expect("a whole record whose CRCs hold");
            records.push(data.to_vec());
            rest = after;
        }
        records
    }

    #[test]
    fn a_new_log_replaces_earlier_event_files_and_holds_the_metrics_file_then_each_write() {
        let run = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            run.path().join("metrics.jsonl"),
            "{\"iteration\":0,\"eval/avg@2\":0.25}\n{\"iteration\":1,\"reward/mean\":0.5}\n",
        )
        .expect("metrics");
        let dir = run.path().join(TENSORBOARD_DIR);
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(
            dir.join("events.out.tfevents.1.drmas.1"),
            b"an earlier process's",
        )
        .expect("old file");
        std::fs::write(dir.join("notes.txt"), b"kept").expect("other file");

        let mut log = TensorBoardLog::open(run.path()).expect("open");
        let mut metrics = Metrics::new(2);
        metrics.set("reward/mean", 0.75);
        log.write(&metrics).expect("write");

        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .expect("read dir")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        assert_eq!(names.len(), 2, "{names:?}");
        assert_eq!(names[1], "notes.txt");
        assert_eq!(log.path(), dir.join(&names[0]));
        let records = read_records(&std::fs::read(log.path()).expect("event file"));
        assert_eq!(
            records.len(),
            4,
            "the version, two replayed lines, one write"
        );
        assert!(records[0].ends_with(FILE_VERSION.as_bytes()));
        // Each scalar event: wall time, the step (but 0), one value.
        let value = |tag: &str, value: f32| {
            let mut entry = Vec::new();
            length_delimited(&mut entry, 1, tag.as_bytes());
            entry.push(key(2, WIRE_FIXED32));
            entry.extend_from_slice(&value.to_le_bytes());
            entry
        };
        for (record, step, entry) in [
            (&records[1], None, value("eval/avg@2", 0.25)),
            (&records[2], Some(1u8), value("reward/mean", 0.5)),
            (&records[3], Some(2), value("reward/mean", 0.75)),
        ] {
            let after_time = &record[9..];
            let summary = match step {
                Some(step) => {
                    assert_eq!(after_time[..2], [key(2, WIRE_VARINT), step]);
                    &after_time[2..]
                }
                None => after_time,
            };
            let mut expected = Vec::new();
            let mut values = Vec::new();
            length_delimited(&mut values, 1, &entry);
            length_delimited(&mut expected, 5, &values);
            assert_eq!(summary, expected.as_slice());
        }
    }

    /// The wall time of each scalar event of `file`, by step.
    fn times_in(file: &Path) -> BTreeMap<i64, f64> {
        let mut times = BTreeMap::new();
        note_wall_times(&std::fs::read(file).expect("event file"), &mut times);
        times
    }

    #[test]
    fn a_restarted_log_keeps_the_wall_times_of_the_iterations_it_replays() {
        let run = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            run.path().join("metrics.jsonl"),
            "{\"iteration\":0,\"eval/avg@2\":0.25}\n",
        )
        .expect("metrics");
        let mut first = TensorBoardLog::open(run.path()).expect("open");
        let mut metrics = Metrics::new(1);
        metrics.set("reward/mean", 0.5);
        std::thread::sleep(std::time::Duration::from_millis(20));
        first.write(&metrics).expect("write");
        let mut line = metrics.to_line();
        line.push('\n');
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(run.path().join("metrics.jsonl"))
            .expect("metrics");
        file.write_all(line.as_bytes()).expect("append");
        let before = times_in(first.path());
        assert_eq!(before.len(), 2);
        assert!(before[&1] > before[&0], "{before:?}");
        // A torn record at the end of the earlier file is ignored.
        drop(first);
        let earlier = std::fs::read_dir(run.path().join(TENSORBOARD_DIR))
            .expect("dir")
            .next()
            .expect("a file")
            .expect("entry")
            .path();
        let mut torn = std::fs::OpenOptions::new()
            .append(true)
            .open(&earlier)
            .expect("event file");
        torn.write_all(&[7, 0, 0]).expect("torn bytes");

        std::thread::sleep(std::time::Duration::from_millis(20));
        let second = TensorBoardLog::open(run.path()).expect("reopen");
        assert!(!earlier.exists() || earlier == second.path());
        assert_eq!(times_in(second.path()), before);
    }

    #[test]
    fn crc32c_gives_the_standard_check_value() {
        // The check value of CRC-32C (RFC 3720, appendix B.4): the CRC of "123456789".
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
    }
}
