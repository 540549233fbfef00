//! [`HfFolder`]: the non-weight files of a Hugging Face model folder (`config.json`,
//! `tokenizer.json`, `tokenizer_config.json`, `generation_config.json`), read and reconciled.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tokenizers::Tokenizer;

use super::config::LlamaConfig;
use super::error::ModelError;
use super::tokenizer_json::parse_tokenizer;

/// The model configuration's file.
pub const CONFIG_FILE: &str = "config.json";
/// The tokenizer's file.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// The tokenizer options' file (chat template, special token strings).
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
/// The generation defaults' file (extra EOS ids).
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";
/// Where transformers 4.4x+ may keep the chat template instead of `tokenizer_config.json`.
pub const CHAT_TEMPLATE_FILE: &str = "chat_template.jinja";

/// What an HF folder says besides its weights.
#[derive(Debug)]
pub struct HfFolder {
    /// The folder.
    pub dir: PathBuf,
    /// `config.json`, with `eos_token_ids` extended by `generation_config.json`'s and the
    /// tokenizer's EOS token (each id once, `config.json`'s first).
    pub config: LlamaConfig,
    /// `tokenizer.json`.
    pub tokenizer: Tokenizer,
    /// The Jinja chat template, if the folder has one.
    pub chat_template: Option<String>,
    /// The BOS token string templates print (`tokenizer_config.json`, else `config.json`'s
    /// id), empty when there is none.
    pub bos_token: String,
    /// The EOS token string templates print, likewise.
    pub eos_token: String,
}

impl HfFolder {
    /// Reads the folder `dir`. `config.json` and `tokenizer.json` are required; the others
    /// are optional. Errors name the file.
    pub fn read(dir: &Path) -> Result<Self, ModelError> {
        if !dir.is_dir() {
            return Err(ModelError::file(dir, "not a folder"));
        }
        let config_path = dir.join(CONFIG_FILE);
        let config_json = read_json(&config_path)?.ok_or_else(|| {
            ModelError::file(&config_path, "missing: an HF model folder needs it")
        })?;
        let mut config =
            LlamaConfig::from_json(&config_json).map_err(|e| e.in_file(&config_path))?;

        let tokenizer_path = dir.join(TOKENIZER_FILE);
        if !tokenizer_path.is_file() {
            return Err(ModelError::file(
                &tokenizer_path,
                "missing: an HF model folder needs it (only fast tokenizers are supported)",
            ));
        }
        let tokenizer_bytes =
            std::fs::read(&tokenizer_path).map_err(|e| ModelError::file(&tokenizer_path, e))?;
        let tokenizer = parse_tokenizer(&tokenizer_bytes)
            .map_err(|e| ModelError::file(&tokenizer_path, format!("not a tokenizer: {e}")))?;

        let tokenizer_config_path = dir.join(TOKENIZER_CONFIG_FILE);
        let tokenizer_config = read_json(&tokenizer_config_path)?.unwrap_or(Value::Null);
        let template_path = dir.join(CHAT_TEMPLATE_FILE);
        let chat_template = if template_path.is_file() {
            Some(
                std::fs::read_to_string(&template_path)
                    .map_err(|e| ModelError::file(&template_path, e))?,
            )
        } else {
            chat_template(&tokenizer_config).map_err(|e| e.in_file(&tokenizer_config_path))?
        };

        let token_of_id = |id: Option<i64>| {
            id.and_then(|id| u32::try_from(id).ok())
                .and_then(|id| tokenizer.id_to_token(id))
        };
        let bos_token = token_string(&tokenizer_config, "bos_token")
            .or_else(|| token_of_id(config.bos_token_id))
            .unwrap_or_default();
        let eos_token = token_string(&tokenizer_config, "eos_token")
            .or_else(|| token_of_id(config.eos_token_ids.first().copied()))
            .unwrap_or_default();

        let generation_path = dir.join(GENERATION_CONFIG_FILE);
        if let Some(generation) = read_json(&generation_path)? {
            let ids = match generation.get("eos_token_id") {
                Some(Value::Array(ids)) => ids.iter().filter_map(Value::as_i64).collect(),
                Some(id) => id.as_i64().into_iter().collect(),
                None => Vec::new(),
            };
            add_ids(&mut config.eos_token_ids, ids);
        }
        let eos_id = tokenizer.token_to_id(&eos_token).map(i64::from);
        add_ids(&mut config.eos_token_ids, eos_id);

        Ok(Self {
            dir: dir.to_owned(),
            config,
            tokenizer,
            chat_template,
            bos_token,
            eos_token,
        })
    }
}

/// The JSON in `path`, `None` when there is no such file.
fn read_json(path: &Path) -> Result<Option<Value>, ModelError> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::file(path, e))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| ModelError::file(path, format!("not valid JSON: {e}")))
}

/// `chat_template` of `tokenizer_config.json`: a string, or a list of `{name, template}` of
/// which the one named `default` is taken.
fn chat_template(tokenizer_config: &Value) -> Result<Option<String>, ModelError> {
    match tokenizer_config.get("chat_template") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(source)) => Ok(Some(source.clone())),
        Some(Value::Array(named)) => {
            let default = named
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"));
            match default
                .and_then(|t| t.get("template"))
                .and_then(Value::as_str)
            {
                Some(source) => Ok(Some(source.to_owned())),
                None => Err(ModelError::Config(
                    "chat_template is a list without a template named \"default\"".to_owned(),
                )),
            }
        }
        Some(_) => Err(ModelError::Config(
            "chat_template is neither a string nor a list of {name, template}".to_owned(),
        )),
    }
}

/// A special token of `tokenizer_config.json`: a string or an `{"content": …}` object.
fn token_string(tokenizer_config: &Value, key: &str) -> Option<String> {
    match tokenizer_config.get(key)? {
        Value::String(token) => Some(token.clone()),
        Value::Object(token) => token.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

/// Appends the ids of `more` that `ids` does not have yet.
fn add_ids(ids: &mut Vec<i64>, more: impl IntoIterator<Item = i64>) {
    for id in more {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn chat_templates_are_strings_or_named_lists() {
        assert_eq!(chat_template(&json!({})).expect("none"), None);
        let one = json!({"chat_template": "{{ x }}"});
        assert_eq!(
            chat_template(&one).expect("one").as_deref(),
            Some("{{ x }}")
        );
        let named = json!({"chat_template": [
            {"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}
        ]});
        assert_eq!(chat_template(&named).expect("named").as_deref(), Some("D"));
        let no_default = json!({"chat_template": [{"name": "tool_use", "template": "T"}]});
        assert!(chat_template(&no_default).is_err());
    }

    #[test]
    fn special_tokens_are_strings_or_objects() {
        let config = json!({
            "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
            "eos_token": "</s>", "pad_token": null,
        });
        assert_eq!(token_string(&config, "bos_token").as_deref(), Some("<s>"));
        assert_eq!(token_string(&config, "eos_token").as_deref(), Some("</s>"));
        assert_eq!(token_string(&config, "pad_token"), None);
    }
}
