//! [`ProcessSetting`]: a choice that holds for the whole process, named by an environment
//! variable and read once.

use std::sync::OnceLock;

use super::error::ModelError;

/// A process-wide choice named by the environment variable [`Self::VAR`]: read and checked the
/// first time it is asked for, the same afterwards.
pub trait ProcessSetting: Copy + 'static {
    /// The environment variable that names the choice.
    const VAR: &'static str;
    /// Each name the variable takes and the choice it names. The first is the default, also
    /// chosen when the variable is unset or empty.
    const CHOICES: &'static [(&'static str, Self)];

    /// Where the process keeps its choice once read.
    fn cell() -> &'static OnceLock<Self>;

    /// Puts the choice into effect (a library's flag, say); run once, before any caller sees
    /// the choice.
    fn apply(self) {}

    /// The choice a value of [`Self::VAR`] names; an unknown name is an error listing the
    /// names.
    fn parse(value: Option<&str>) -> Result<Self, ModelError> {
        let value = value.unwrap_or("");
        if value.is_empty() {
            return Ok(Self::CHOICES[0].1);
        }
        if let Some(&(_, choice)) = Self::CHOICES.iter().find(|(name, _)| *name == value) {
            return Ok(choice);
        }
        let mut expected = String::new();
        for (i, (name, _)) in Self::CHOICES.iter().enumerate() {
            let separator = match i {
                0 => "",
                _ if i + 1 == Self::CHOICES.len() => " or ",
                _ => ", ",
            };
            expected.push_str(separator);
            expected.push_str(name);
            if i == 0 {
                expected.push_str(" (the default)");
            }
        }
        Err(ModelError::Config(format!(
            "{}={value:?}: expected {expected}",
            Self::VAR
        )))
    }

    /// The process's choice: [`Self::VAR`] read, checked and applied the first time.
    fn for_process() -> Result<Self, ModelError> {
        if let Some(&chosen) = Self::cell().get() {
            return Ok(chosen);
        }
        let choice = Self::parse(std::env::var(Self::VAR).ok().as_deref())?;
        Ok(*Self::cell().get_or_init(|| {
            choice.apply();
            choice
        }))
    }

    /// The choice [`Self::for_process`] made, or the default before it was asked for.
    fn current() -> Self {
        Self::cell().get().copied().unwrap_or(Self::CHOICES[0].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Shade {
        Light,
        Dark,
        Dim,
    }

    impl ProcessSetting for Shade {
        const VAR: &'static str = "DRMAS_TEST_SHADE";
        const CHOICES: &'static [(&'static str, Self)] = &[
            ("light", Self::Light),
            ("dark", Self::Dark),
            ("dim", Self::Dim),
        ];

        fn cell() -> &'static OnceLock<Self> {
            static CHOSEN: OnceLock<Shade> = OnceLock::new();
            &CHOSEN
        }
    }

    #[test]
    fn unset_or_empty_is_the_first_choice_and_names_choose_theirs() {
        assert_eq!(Shade::parse(None).expect("unset"), Shade::Light);
        assert_eq!(Shade::parse(Some("")).expect("empty"), Shade::Light);
        assert_eq!(Shade::parse(Some("dark")).expect("dark"), Shade::Dark);
        assert_eq!(Shade::parse(Some("dim")).expect("dim"), Shade::Dim);
    }

    #[test]
    fn an_unknown_name_is_refused_with_the_variable_and_every_name() {
        let error = Shade::parse(Some("Dark")).expect_err("case matters");
        assert_eq!(
            error.to_string(),
            "DRMAS_TEST_SHADE=\"Dark\": expected light (the default), dark or dim"
        );
    }

    #[test]
    fn the_process_keeps_its_first_choice() {
        assert_eq!(Shade::current(), Shade::Light);
        let _ = Shade::cell().set(Shade::Dim);
        assert_eq!(Shade::for_process().expect("set"), Shade::Dim);
        assert_eq!(Shade::current(), Shade::Dim);
    }
}
