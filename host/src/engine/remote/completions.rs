//! `backend = "openai"`: one prompt as one `POST /v1/completions` request, and its answer as a
//! [`Generation`]. Tokens come back as ids (`logprobs.tokens` written `token_id:N`, vLLM's
//! `return_tokens_as_token_ids`), never re-tokenised from text.

use super::connection::{Connection, Failure};
use super::openai_wire::{
    CompletionAnswer, CompletionBody, Prompt, COMPLETIONS_PATH, TOKEN_ID_PREFIX,
};
use super::wire::OneOrEach;
use crate::engine::{FinishReason, Generation, GenerationRequest};

/// The body asking for one sample of `request`, drawn from `seed`, from the model the servers
/// serve as `model`, with each sampled token's id and logprob.
pub fn body(request: &GenerationRequest, seed: i64, model: &str) -> CompletionBody {
    let p = request.params;
    CompletionBody {
        model: model.to_owned(),
        prompt: Prompt::Ids(request.prompt.clone()),
        max_tokens: Some(request.max_new_tokens),
        temperature: Some(p.temperature),
        top_p: Some(p.top_p),
        top_k: Some(if p.top_k == 0 { -1 } else { p.top_k as i64 }),
        seed: Some(seed),
        stop: (!request.stop.is_empty()).then(|| OneOrEach::Each(request.stop.clone())),
        stop_token_ids: (!request.stop_tokens.is_empty()).then(|| request.stop_tokens.clone()),
        logprobs: Some(0),
        n: Some(1),
        return_tokens_as_token_ids: Some(true),
        skip_special_tokens: None,
        ignore_eos: request.ignore_eos.then_some(true),
        stream: None,
        echo: None,
    }
}

/// Sends `body` to `connection` and reads its one choice as a [`Generation`].
pub fn generate(connection: &Connection, body: &CompletionBody) -> Result<Generation, Failure> {
    let answer: CompletionAnswer = connection.post(COMPLETIONS_PATH, body)?;
    generation(answer)
}

/// The one choice of `answer` as a [`Generation`]: tokens and logprobs from `logprobs`, the
/// finish reason from `finish_reason` and `stop_reason` (an aborted request is worth another
/// try).
fn generation(answer: CompletionAnswer) -> Result<Generation, Failure> {
    let fatal = |reason: String| Failure::Fatal(reason);
    let [choice] = <[_; 1]>::try_from(answer.choices)
        .map_err(|choices| fatal(format!("{} choices for one sample", choices.len())))?;
    let logprobs = choice
        .logprobs
        .ok_or_else(|| fatal("no `logprobs` in the choice (the request asked for them)".into()))?;
    if logprobs.tokens.len() != logprobs.token_logprobs.len() {
        return Err(fatal(format!(
            "{} tokens with {} token_logprobs",
            logprobs.tokens.len(),
            logprobs.token_logprobs.len()
        )));
    }
    let tokens = logprobs
        .tokens
        .iter()
        .map(|token| token_id(token))
        .collect::<Result<Vec<i64>, String>>()
        .map_err(fatal)?;
    let logprobs = logprobs
        .token_logprobs
        .iter()
        .enumerate()
        .map(|(i, lp)| lp.map(|lp| lp as f32).ok_or(i))
        .collect::<Result<Vec<f32>, usize>>()
        .map_err(|i| fatal(format!("token {i} has no logprob")))?;
    let finish = match (choice.finish_reason.as_deref(), &choice.stop_reason) {
        (Some("length"), _) => FinishReason::Length,
        (Some("stop"), Some(serde_json::Value::String(_))) => FinishReason::Stop,
        (Some("stop"), _) => FinishReason::Eos,
        (Some("abort"), _) => {
            return Err(Failure::Transient("the server aborted the request".into()))
        }
        (other, _) => {
            return Err(fatal(format!(
                "finish_reason {other:?}, not stop or length"
            )))
        }
    };
    // The OpenAI protocol reports cached prompt tokens per response, not per choice.
    Ok(Generation {
        tokens,
        logprobs,
        finish,
        cached_tokens: 0,
    })
}

/// The id of a token written `token_id:N`.
fn token_id(token: &str) -> Result<i64, String> {
    token
        .strip_prefix(TOKEN_ID_PREFIX)
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| {
            format!(
                "token `{token}` is not written as {TOKEN_ID_PREFIX}N: the server ignored \
                 return_tokens_as_token_ids (a vLLM too old to take it per request?)"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::remote::openai_wire::{ChoiceLogprobs, CompletionChoice, Usage};

    fn answer(tokens: &[&str], finish: &str, stop_reason: serde_json::Value) -> CompletionAnswer {
        CompletionAnswer {
            id: "cmpl-1".into(),
            object: "text_completion".into(),
            created: 0,
            model: "m".into(),
            choices: vec![CompletionChoice {
                index: 0,
                text: String::new(),
                logprobs: Some(ChoiceLogprobs {
                    text_offset: Vec::new(),
                    token_logprobs: tokens.iter().map(|_| Some(-0.5)).collect(),
                    tokens: tokens.iter().map(|t| (*t).to_owned()).collect(),
                    top_logprobs: Vec::new(),
                }),
                finish_reason: Some(finish.into()),
                stop_reason: Some(stop_reason),
            }],
            usage: Usage {
                prompt_tokens: 1,
                total_tokens: 1 + tokens.len(),
                completion_tokens: tokens.len(),
                prompt_tokens_details: None,
            },
        }
    }

    #[test]
    fn an_answer_reads_as_token_ids_logprobs_and_a_finish_reason() {
        let read = |finish, reason| {
            generation(answer(&["token_id:5", "token_id:2"], finish, reason)).expect("readable")
        };
        let eos = read("stop", serde_json::Value::Null);
        assert_eq!(eos.tokens, [5, 2]);
        assert_eq!(eos.logprobs, [-0.5, -0.5]);
        assert_eq!(eos.finish, FinishReason::Eos);
        assert_eq!(read("stop", 2.into()).finish, FinishReason::Eos);
        assert_eq!(read("stop", "\n".into()).finish, FinishReason::Stop);
        assert_eq!(
            read("length", serde_json::Value::Null).finish,
            FinishReason::Length
        );
    }

    #[test]
    fn text_tokens_and_unknown_finishes_are_refused_and_aborts_retried() {
        let error = generation(answer(&["hello"], "stop", serde_json::Value::Null))
            .expect_err("a text token");
        assert!(
            matches!(&error, Failure::Fatal(why) if why.contains("return_tokens_as_token_ids")),
            "{error}"
        );
        let error = generation(answer(
            &["token_id:1"],
            "tool_calls",
            serde_json::Value::Null,
        ))
        .expect_err("an unknown finish");
        assert!(matches!(error, Failure::Fatal(_)), "{error}");
        let error = generation(answer(&["token_id:1"], "abort", serde_json::Value::Null))
            .expect_err("an abort");
        assert!(matches!(error, Failure::Transient(_)), "{error}");
    }
}
