//! Each kind of file that is not a library for this machine, made from the bytes of a real one:
//! this test binary (a position-independent executable, so a shared object like a plugin).

use std::path::{Path, PathBuf};

use super::check_shared_library;

/// The bytes of a real ELF shared object of this machine.
fn real_elf() -> Vec<u8> {
    std::fs::read(std::env::current_exe().expect("the test binary")).expect("read it")
}

/// Writes `bytes` as `libplugin.so` in a fresh folder (kept alive by the returned guard).
fn plugin_file(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let folder = tempfile::tempdir().expect("a temp dir");
    let path = folder.path().join("libplugin.so");
    std::fs::write(&path, bytes).expect("write the file");
    (folder, path)
}

/// The error's text for `bytes` written as a plugin file.
fn refusal(bytes: &[u8]) -> (String, PathBuf) {
    let (_folder, path) = plugin_file(bytes);
    let error = check_shared_library(&path)
        .expect_err("refused")
        .to_string();
    (error, path)
}

fn assert_refused_as(bytes: &[u8], what: &str) {
    let (error, path) = refusal(bytes);
    let expected = format!(
        "{} is not a shared library this machine can load: {what}",
        path.display()
    );
    assert!(error.starts_with(&expected), "{error}");
    assert!(
        error.contains("remove it from the plugins folder"),
        "{error}"
    );
}

fn patched(at: usize, bytes: &[u8]) -> Vec<u8> {
    let mut elf = real_elf();
    elf[at..at + bytes.len()].copy_from_slice(bytes);
    elf
}

#[test]
fn a_real_shared_object_of_this_machine_passes() {
    let (_folder, path) = plugin_file(&real_elf());
    check_shared_library(&path).expect("a library of this machine");
}

#[test]
fn a_text_file_named_so_is_refused_as_text() {
    assert_refused_as(
        b"#!/bin/sh\necho not a library\n",
        "it is a text file, not an ELF binary",
    );
}

#[test]
fn an_empty_file_and_other_binary_data_are_refused() {
    assert_refused_as(b"", "it is empty");
    assert_refused_as(
        &[0x50, 0x4b, 0x03, 0x04, 0x00, 0xff],
        "it is not an ELF binary",
    );
}

#[test]
fn an_elf_for_another_architecture_is_refused_naming_it() {
    let other: u16 = if cfg!(target_arch = "aarch64") {
        62
    } else {
        183
    };
    let name = if other == 62 {
        "x86-64"
    } else {
        "AArch64 (64-bit ARM)"
    };
    assert_refused_as(
        &patched(18, &other.to_ne_bytes()),
        &format!("it is an ELF binary for {name}"),
    );
}

#[test]
fn a_32_bit_elf_is_refused() {
    assert_refused_as(&patched(4, &[1]), "it is a 32-bit ELF binary");
}

#[test]
fn an_elf_of_the_other_byte_order_is_refused() {
    let order = if cfg!(target_endian = "little") { 2 } else { 1 };
    let words = if order == 2 { "big" } else { "little" };
    assert_refused_as(
        &patched(5, &[order]),
        &format!("it is a {words}-endian ELF binary"),
    );
}

#[test]
fn an_executable_or_object_file_is_not_a_shared_library() {
    assert_refused_as(
        &patched(16, &2u16.to_ne_bytes()),
        "it is an ELF executable, not a shared library",
    );
    assert_refused_as(
        &patched(16, &1u16.to_ne_bytes()),
        "it is an ELF object file (.o), not linked into a shared library",
    );
}

#[test]
fn a_truncated_library_is_refused_before_the_loader_maps_it() {
    let elf = real_elf();
    assert_refused_as(
        &elf[..40],
        "it is an ELF file of 40 bytes, shorter than an ELF header",
    );
    let (error, _) = refusal(&elf[..4096]);
    assert!(
        error.contains("a loadable segment ends at byte")
            && error.contains("beyond its 4096 bytes"),
        "{error}"
    );
    let (error, _) = refusal(&elf[..64]);
    assert!(error.contains("its program header table"), "{error}");
}

#[test]
fn a_missing_file_is_named() {
    let error = check_shared_library(Path::new("/nonexistent/libplugin.so"))
        .expect_err("missing")
        .to_string();
    assert!(
        error.starts_with("/nonexistent/libplugin.so is not a shared library this machine can load: it cannot be read"),
        "{error}"
    );
}
