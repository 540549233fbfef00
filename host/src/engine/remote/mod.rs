//! Generation on inference servers that speak SGLang's native HTTP protocol ([`wire`]): SGLang
//! itself, sglang-router in front of a fleet, or `drmas-host serve`.

pub mod wire;
