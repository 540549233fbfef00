//! [`Isa`]: the instruction sets the CPU kernels have a version for, detected at run time.

use std::fmt;

/// A version of the kernels: every kernel has one per variant, widest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// AVX-512F: 16-float vectors, 32 registers, masked loads and stores, scatters.
    Avx512,
    /// AVX2 with FMA: 8-float vectors, 16 registers.
    Avx2,
    /// Plain Rust, for any CPU (the compiler vectorises for the baseline target).
    Portable,
}

impl Isa {
    /// Every version, widest first.
    pub const ALL: [Isa; 3] = [Isa::Avx512, Isa::Avx2, Isa::Portable];

    /// Whether this CPU runs this version's instructions.
    pub fn is_supported(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx512 | Isa::Avx2 => false,
            Isa::Portable => true,
        }
    }

    /// The versions this CPU runs, widest first (always ends with [`Isa::Portable`]).
    pub fn supported() -> Vec<Isa> {
        Isa::ALL
            .into_iter()
            .filter(|isa| isa.is_supported())
            .collect()
    }

    /// The widest version this CPU runs.
    pub fn best() -> Isa {
        Isa::ALL
            .into_iter()
            .find(|isa| isa.is_supported())
            .unwrap_or(Isa::Portable)
    }

    /// The name `DRMAS_CPU_KERNELS` takes: `avx512`, `avx2` or `portable`.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::Portable => "portable",
        }
    }

    /// The version named `name` (see [`Isa::name`]).
    pub fn from_name(name: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|isa| isa.name() == name)
    }

    /// Panics unless this CPU runs this version: the kernels' entry points call it before
    /// running its instructions.
    pub(crate) fn assert_supported(self) {
        assert!(self.is_supported(), "this CPU does not support {self}");
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_the_portable_version_always_runs() {
        for isa in Isa::ALL {
            assert_eq!(Isa::from_name(isa.name()), Some(isa));
        }
        assert_eq!(Isa::from_name("sse"), None);
        assert_eq!(Isa::supported().last(), Some(&Isa::Portable));
        assert_eq!(Isa::supported()[0], Isa::best());
    }
}
