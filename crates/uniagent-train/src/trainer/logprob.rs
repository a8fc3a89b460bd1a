//! Log-probabilities of response tokens under a model.

use tch::{Kind, Tensor};
use uniagent_core::Result;

use super::batch::PaddedBatch;
use crate::model::Qwen2ForCausalLM;

/// Logits (float32, divided by `temperature`) at the positions that predict each response
/// token: `[B, R, vocab]`. Only those positions go through the output projection.
pub(crate) fn response_logits(
    model: &Qwen2ForCausalLM,
    batch: &PaddedBatch,
    temperature: f64,
) -> Result<Tensor> {
    let hidden = model.hidden_states(&batch.input_ids, None, Some(&batch.attention_mask), None)?;
    let h = hidden.size()[2];
    let index = batch.predict_index.unsqueeze(-1).expand([-1, -1, h], false);
    let picked = hidden.gather(1, &index, false);
    let logits = model.logits(&picked).to_kind(Kind::Float);
    Ok(if temperature == 1.0 {
        logits
    } else {
        logits / temperature
    })
}

/// `log_softmax(logits)[response id]`: `[B, R]`.
pub(crate) fn token_logprobs(logits: &Tensor, response_ids: &Tensor) -> Tensor {
    let picked = logits
        .gather(-1, &response_ids.unsqueeze(-1), false)
        .squeeze_dim(-1);
    picked - logits.logsumexp([-1], false)
}
