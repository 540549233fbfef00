//! What a plugin file is, read from its ELF header before it is handed to the dynamic loader.
//! `dlopen` runs a library's constructors, and a file it cannot map (text named `.so`, a library
//! for another machine, a truncated copy) gives a terse loader message at best; reading the
//! header first names the file and what it is instead.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The ELF header's length: 64 bytes for 64-bit files (52 for 32-bit ones).
const HEADER_LEN: usize = 64;
/// An ELF64 program header's length.
const PROGRAM_HEADER_LEN: usize = 56;
/// `e_type` of a shared object (a library, or a position-independent executable).
const ET_DYN: u16 = 3;
/// `p_type` of a loadable segment.
const PT_LOAD: u32 = 1;

/// A plugin file the dynamic loader is not given, and what it is instead.
#[derive(Debug, thiserror::Error)]
#[error(
    "{path} is not a shared library this machine can load: {what}; remove it from the plugins \
     folder, or build the plugin for {expected} (cargo build --release in its crate)"
)]
pub struct ElfError {
    /// The file.
    pub path: PathBuf,
    /// What the file is, in words.
    pub what: String,
    /// The platform the host runs on, in words.
    pub expected: &'static str,
}

/// Checks that `path` is an ELF shared object for this machine (64-bit, this byte order and
/// architecture) whose loadable segments all lie within the file. Reads the header and the
/// program headers only.
pub fn check_shared_library(path: &Path) -> Result<(), ElfError> {
    let refuse = |what: String| ElfError {
        path: path.to_owned(),
        what,
        expected: this_platform(),
    };
    let mut file = File::open(path).map_err(|e| refuse(format!("it cannot be read ({e})")))?;
    let len = file
        .metadata()
        .map_err(|e| refuse(format!("it cannot be read ({e})")))?
        .len();
    let mut header = Vec::with_capacity(HEADER_LEN);
    (&mut file)
        .take(HEADER_LEN as u64)
        .read_to_end(&mut header)
        .map_err(|e| refuse(format!("it cannot be read ({e})")))?;
    describe_header(&header, len).map_err(refuse)?;
    let (offset, count, entry_len) = program_headers(&header);
    let table_end = offset.saturating_add(u64::from(count) * u64::from(entry_len));
    if entry_len as usize != PROGRAM_HEADER_LEN || table_end > len {
        return Err(refuse(format!(
            "its program header table (bytes {offset}..{table_end}) does not fit in its {len} \
             bytes; the file is truncated or damaged"
        )));
    }
    let mut table = vec![0; usize::from(count) * PROGRAM_HEADER_LEN];
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(offset))
        .and_then(|_| file.read_exact(&mut table))
        .map_err(|e| refuse(format!("its program headers cannot be read ({e})")))?;
    for segment in table.chunks_exact(PROGRAM_HEADER_LEN) {
        let kind = u32_at(segment, 0);
        let start = u64_at(segment, 8);
        let size = u64_at(segment, 32);
        let end = start.saturating_add(size);
        if kind == PT_LOAD && end > len {
            return Err(refuse(format!(
                "a loadable segment ends at byte {end}, beyond its {len} bytes; the file is \
                 truncated (an interrupted copy or download)"
            )));
        }
    }
    Ok(())
}

/// Checks the ELF header (`header`: the file's first bytes, `len`: its size); the error is what
/// the file is instead.
fn describe_header(header: &[u8], len: u64) -> Result<(), String> {
    if len == 0 {
        return Err("it is empty".to_owned());
    }
    if !header.starts_with(b"\x7fELF") {
        let text = header
            .iter()
            .all(|&b| b.is_ascii_graphic() || b.is_ascii_whitespace());
        return Err(if text {
            "it is a text file, not an ELF binary".to_owned()
        } else {
            "it is not an ELF binary (it does not start with \\x7fELF)".to_owned()
        });
    }
    let Some(&class) = header.get(4) else {
        return Err(format!(
            "it is an ELF file of {len} bytes, shorter than an ELF header; the file is truncated"
        ));
    };
    match class {
        2 => {}
        1 => return Err("it is a 32-bit ELF binary".to_owned()),
        class => return Err(format!("it is an ELF binary of unknown class {class}")),
    }
    let little = match header.get(5) {
        Some(1) => true,
        Some(2) => false,
        _ => return Err("its ELF header names no byte order (byte 5 is not 1 or 2)".to_owned()),
    };
    if little != cfg!(target_endian = "little") {
        let order = if little { "little" } else { "big" };
        return Err(format!("it is a {order}-endian ELF binary"));
    }
    if header.len() < HEADER_LEN {
        return Err(format!(
            "it is an ELF file of {len} bytes, shorter than an ELF header; the file is truncated"
        ));
    }
    let machine = u16_at(header, 18);
    if this_machine().is_some_and(|ours| machine != ours) {
        return Err(format!("it is an ELF binary for {}", machine_name(machine)));
    }
    match u16_at(header, 16) {
        ET_DYN => Ok(()),
        1 => Err("it is an ELF object file (.o), not linked into a shared library".to_owned()),
        2 => Err("it is an ELF executable, not a shared library".to_owned()),
        4 => Err("it is an ELF core dump".to_owned()),
        kind => Err(format!(
            "it is an ELF file of type {kind}, not a shared library"
        )),
    }
}

/// The program header table's offset, entry count and entry length, from an ELF64 header.
fn program_headers(header: &[u8]) -> (u64, u16, u16) {
    (u64_at(header, 32), u16_at(header, 56), u16_at(header, 54))
}

/// The `e_machine` of this build's architecture (`None` for one not listed: not checked).
fn this_machine() -> Option<u16> {
    match std::env::consts::ARCH {
        "x86_64" => Some(62),
        "aarch64" => Some(183),
        "riscv64" => Some(243),
        "powerpc64" => Some(21),
        "s390x" => Some(22),
        "loongarch64" => Some(258),
        _ => None,
    }
}

/// An `e_machine` in words.
fn machine_name(machine: u16) -> String {
    match machine {
        3 => "x86 (32-bit)".to_owned(),
        8 => "MIPS".to_owned(),
        20 | 21 => "PowerPC".to_owned(),
        22 => "IBM s390".to_owned(),
        40 => "ARM (32-bit)".to_owned(),
        62 => "x86-64".to_owned(),
        183 => "AArch64 (64-bit ARM)".to_owned(),
        243 => "RISC-V".to_owned(),
        258 => "LoongArch".to_owned(),
        other => format!("another architecture (e_machine {other})"),
    }
}

/// This host's platform in words, for the fix.
fn this_platform() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "x86-64 Linux",
        "aarch64" => "AArch64 Linux",
        _ => "this machine",
    }
}

/// The ELF file's byte order is checked first, so fields are read in this machine's order.
fn u16_at(bytes: &[u8], at: usize) -> u16 {
    let mut field = [0; 2];
    field.copy_from_slice(&bytes[at..at + 2]);
    u16::from_ne_bytes(field)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut field = [0; 4];
    field.copy_from_slice(&bytes[at..at + 4]);
    u32::from_ne_bytes(field)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut field = [0; 8];
    field.copy_from_slice(&bytes[at..at + 8]);
    u64::from_ne_bytes(field)
}

#[cfg(test)]
mod tests;
