//! The embedded default model (SmolLM2-135M-Instruct) as the engine benchmarks run it: f32 on
//! the CPU kernels a worker group uses, and prompts in its chat template.

use drmas_host::engine::cpu::backend_for;
use drmas_host::model::gguf::GgufModel;
use drmas_host::model::llama::Llama;
use tch::Device;
use tokenizers::Tokenizer;

/// Sets libtorch's `threads` and loads the model and its tokenizer, warning when the benchmark
/// was built without optimisation.
pub fn load(threads: i32) -> (Tokenizer, Llama) {
    if cfg!(debug_assertions) {
        println!("warning: built in the dev profile; for figures, run without `--profile dev`");
    }
    tch::set_num_threads(threads);
    let path = drmas_host::model::default_model_path();
    let gguf = GgufModel::open(&path).expect("the model file opens (scripts/install-model.sh)");
    let tokenizer = gguf.tokenizer().expect("the tokenizer loads");
    let mut llama = Llama::from_gguf(&gguf, Device::Cpu).expect("the model loads");
    llama.set_backend(backend_for(Device::Cpu).expect("the CPU kernels"));
    (tokenizer, llama)
}

/// Question `n` of a word problem as a user turn in the chat template, ready for the answer.
pub fn word_problem(tokenizer: &Tokenizer, n: usize) -> Vec<i64> {
    let text = format!(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
         Face<|im_end|>\n<|im_start|>user\nQuestion {n}: a farmer has 17 sheep, 3 cows and \
         twice as many chickens as cows. He sells 5 sheep and buys 4 more cows. How many \
         animals does he have now? Explain step by step.<|im_end|>\n<|im_start|>assistant\n"
    );
    tokens(tokenizer, &text)
}

/// The token ids of `text` (special tokens written out are read as such).
pub fn tokens(tokenizer: &Tokenizer, text: &str) -> Vec<i64> {
    let encoding = tokenizer.encode(text, false).expect("encodes");
    encoding.get_ids().iter().map(|&id| i64::from(id)).collect()
}
