//! A parquet page header's sizes, read straight from the file before the page is decoded: the
//! parquet crate reads a page whole and decompresses it in one allocation, so a page holding a
//! runaway value must be refused from its header. Headers are Thrift compact-protocol structs
//! (parquet-format's `PageHeader`); only the fields needed here are kept, the rest skipped
//! without being held (a header's statistics may hold a value as long as the page's).

use std::io::{self, BufRead, Seek};

/// What a page header says about its page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageHeader {
    /// `true` for a dictionary page (its values are the column chunk's distinct values).
    pub is_dictionary: bool,
    /// The page's size once decompressed.
    pub uncompressed_size: u64,
    /// The page's size in the file, after its header.
    pub compressed_size: u64,
    /// The values (data pages: with nulls; dictionary pages: entries) it holds.
    pub values: u64,
    /// The header's own length in the file.
    pub header_len: u64,
}

/// How deep structs and lists may nest in a header (parquet's use two levels).
const MAX_DEPTH: u32 = 16;

/// Compact-protocol field types.
mod kind {
    pub const TRUE: u8 = 1;
    pub const FALSE: u8 = 2;
    pub const BYTE: u8 = 3;
    pub const I16: u8 = 4;
    pub const I32: u8 = 5;
    pub const I64: u8 = 6;
    pub const DOUBLE: u8 = 7;
    pub const BINARY: u8 = 8;
    pub const LIST: u8 = 9;
    pub const SET: u8 = 10;
    pub const MAP: u8 = 11;
    pub const STRUCT: u8 = 12;
    pub const UUID: u8 = 13;
}

/// Reads the page header at the reader's position, leaving it at the page's data; a header that
/// would run past `limit` bytes (what is left of its column chunk) is an error.
pub(crate) fn read_page_header(
    input: &mut (impl BufRead + Seek),
    limit: u64,
) -> io::Result<PageHeader> {
    let mut reader = Compact {
        input,
        read: 0,
        limit,
    };
    let mut page_type = None;
    let mut uncompressed_size = None;
    let mut compressed_size = None;
    let mut values = None;
    let mut field = 0i16;
    while let Some((id, kind)) = reader.field_header(&mut field)? {
        match (id, kind) {
            (1, kind::I32) => page_type = Some(reader.varint_i64()?),
            (2, kind::I32) => uncompressed_size = Some(reader.varint_i64()?),
            (3, kind::I32) => compressed_size = Some(reader.varint_i64()?),
            // data_page_header, dictionary_page_header, data_page_header_v2: num_values is each
            // one's first field.
            (5 | 7 | 8, kind::STRUCT) => values = Some(reader.num_values()?),
            (_, kind) => reader.skip(kind, 0)?,
        }
    }
    let (Some(page_type), Some(uncompressed), Some(compressed)) =
        (page_type, uncompressed_size, compressed_size)
    else {
        return Err(invalid("a page header without its type or sizes"));
    };
    let size = |value: i64| u64::try_from(value).map_err(|_| invalid("a negative page size"));
    Ok(PageHeader {
        is_dictionary: page_type == 2,
        uncompressed_size: size(uncompressed)?,
        compressed_size: size(compressed)?,
        values: values.map_or(0, |v| u64::try_from(v).unwrap_or(0)),
        header_len: reader.read,
    })
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// A compact-protocol reader counting the bytes it consumes, never past its limit (so every
/// loop over a declared count ends: each element takes at least a byte).
struct Compact<'a, R> {
    input: &'a mut R,
    read: u64,
    limit: u64,
}

impl<R: BufRead + Seek> Compact<'_, R> {
    fn byte(&mut self) -> io::Result<u8> {
        if self.read >= self.limit {
            return Err(invalid("a page header longer than its column chunk"));
        }
        let mut one = [0];
        self.input.read_exact(&mut one)?;
        self.read += 1;
        Ok(one[0])
    }

    fn skip_bytes(&mut self, count: u64) -> io::Result<()> {
        if self.read.saturating_add(count) > self.limit {
            return Err(invalid("a page header longer than its column chunk"));
        }
        let step = i64::try_from(count).map_err(|_| invalid("a field longer than the file"))?;
        self.input.seek_relative(step)?;
        self.read += count;
        Ok(())
    }

    fn varint(&mut self) -> io::Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(invalid("a varint longer than 10 bytes"))
    }

    fn varint_i64(&mut self) -> io::Result<i64> {
        let zigzag = self.varint()?;
        Ok((zigzag >> 1) as i64 ^ -((zigzag & 1) as i64))
    }

    /// The next field's id and type, or `None` at the struct's end; `last` is the previous id.
    fn field_header(&mut self, last: &mut i16) -> io::Result<Option<(i16, u8)>> {
        let byte = self.byte()?;
        if byte == 0 {
            return Ok(None);
        }
        let delta = i16::from(byte >> 4);
        let id = if delta == 0 {
            i16::try_from(self.varint_i64()?).map_err(|_| invalid("a field id out of range"))?
        } else {
            last.saturating_add(delta)
        };
        *last = id;
        Ok(Some((id, byte & 0x0f)))
    }

    /// The first field of a page-type header struct (`num_values`), the rest skipped.
    fn num_values(&mut self) -> io::Result<i64> {
        let mut values = 0;
        let mut field = 0i16;
        while let Some((id, kind)) = self.field_header(&mut field)? {
            match (id, kind) {
                (1, kind::I32) => values = self.varint_i64()?,
                (_, kind) => self.skip(kind, 1)?,
            }
        }
        Ok(values)
    }

    /// Passes over one element of a list, set or map: like a field, but a boolean takes a byte.
    fn skip_element(&mut self, kind: u8, depth: u32) -> io::Result<()> {
        match kind {
            kind::TRUE | kind::FALSE => self.skip_bytes(1),
            kind => self.skip(kind, depth),
        }
    }

    /// Passes over one field's value of type `kind`.
    fn skip(&mut self, kind: u8, depth: u32) -> io::Result<()> {
        if depth > MAX_DEPTH {
            return Err(invalid("a page header nested too deeply"));
        }
        match kind {
            kind::TRUE | kind::FALSE => Ok(()),
            kind::BYTE => self.skip_bytes(1),
            kind::I16 | kind::I32 | kind::I64 => self.varint().map(drop),
            kind::DOUBLE => self.skip_bytes(8),
            kind::UUID => self.skip_bytes(16),
            kind::BINARY => {
                let len = self.varint()?;
                self.skip_bytes(len)
            }
            kind::LIST | kind::SET => {
                let header = self.byte()?;
                let count = match header >> 4 {
                    15 => self.varint()?,
                    short => u64::from(short),
                };
                for _ in 0..count {
                    self.skip_element(header & 0x0f, depth + 1)?;
                }
                Ok(())
            }
            kind::MAP => {
                let count = self.varint()?;
                if count == 0 {
                    return Ok(());
                }
                let types = self.byte()?;
                for _ in 0..count {
                    self.skip_element(types >> 4, depth + 1)?;
                    self.skip_element(types & 0x0f, depth + 1)?;
                }
                Ok(())
            }
            kind::STRUCT => {
                let mut field = 0i16;
                while let Some((_, kind)) = self.field_header(&mut field)? {
                    self.skip(kind, depth + 1)?;
                }
                Ok(())
            }
            other => Err(invalid(&format!("an unknown field type {other}"))),
        }
    }
}
