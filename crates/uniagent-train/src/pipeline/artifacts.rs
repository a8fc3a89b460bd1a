//! What a run leaves on disk besides metrics: the learning curve and the Hugging Face export.

use std::path::Path;

use uniagent_core::{Error, Result};

use crate::model::Qwen2ForCausalLM;

/// `learning_curve.png` (640×400): held-out success at every evaluation (red, with points)
/// and the success rate of each RL step's rollouts (blue), from step 0 to `steps`; the y axis
/// runs from 0 to 1 with grey lines every 0.25. No text, so no font is needed.
pub fn plot_learning_curve(
    path: &Path,
    held_out: &[(usize, f64)],
    train: &[(usize, f64)],
    steps: usize,
) -> Result<()> {
    use plotters::prelude::*;
    let err =
        |e: &dyn std::fmt::Display| Error::internal(format!("drawing {}: {e}", path.display()));
    let x_max = steps.max(1) as f64;
    let root = BitMapBackend::new(path, (640, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .margin(24)
        .build_cartesian_2d(0f64..x_max, 0f64..1f64)
        .map_err(|e| err(&e))?;
    let grey = RGBColor(210, 210, 210);
    for k in 0..=4 {
        let y = f64::from(k) / 4.0;
        chart
            .draw_series(LineSeries::new(vec![(0.0, y), (x_max, y)], &grey))
            .map_err(|e| err(&e))?;
    }
    chart
        .draw_series(LineSeries::new(vec![(0.0, 0.0), (0.0, 1.0)], &BLACK))
        .map_err(|e| err(&e))?;
    let blue = RGBColor(90, 120, 230);
    chart
        .draw_series(LineSeries::new(
            train.iter().map(|&(s, r)| (s as f64, r)),
            &blue,
        ))
        .map_err(|e| err(&e))?;
    let red = RGBColor(220, 40, 40);
    chart
        .draw_series(LineSeries::new(
            held_out.iter().map(|&(s, r)| (s as f64, r)),
            red.stroke_width(3),
        ))
        .map_err(|e| err(&e))?;
    chart
        .draw_series(
            held_out
                .iter()
                .map(|&(s, r)| Circle::new((s as f64, r), 5, red.filled())),
        )
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// Writes `policy` as a Hugging Face folder that transformers and
/// [`Qwen2ForCausalLM::load`] read: `config.json` and `generation_config.json` carrying
/// `eos_token_id` (so that `generate` stops at the end-of-turn token), `model.safetensors`,
/// and the tokenizer files (`tokenizer.json`, `tokenizer_config.json`,
/// `chat_template.jinja`) copied from `tokenizer_dir` where present.
pub fn export_hf(
    policy: &Qwen2ForCausalLM,
    eos_token_id: u32,
    tokenizer_dir: Option<&Path>,
    dir: &Path,
) -> Result<()> {
    policy.save_pretrained(dir)?;
    let io = |what: &str, e: std::io::Error| Error::io(format!("{what} in {}", dir.display()), e);
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| io("reading config.json", e))?;
    let mut config: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::internal(format!("config.json we wrote is not JSON: {e}")))?;
    config["eos_token_id"] = eos_token_id.into();
    std::fs::write(&path, config.to_string()).map_err(|e| io("writing config.json", e))?;
    let generation = serde_json::json!({
        "eos_token_id": eos_token_id,
        "bos_token_id": config["bos_token_id"],
        "_from_model_config": false,
    });
    std::fs::write(dir.join("generation_config.json"), generation.to_string())
        .map_err(|e| io("writing generation_config.json", e))?;
    if let Some(src) = tokenizer_dir {
        let same = src.canonicalize().ok() == dir.canonicalize().ok();
        for file in [
            "tokenizer.json",
            "tokenizer_config.json",
            "chat_template.jinja",
        ] {
            if !same && src.join(file).exists() {
                std::fs::copy(src.join(file), dir.join(file))
                    .map_err(|e| io(&format!("copying {file}"), e))?;
            }
        }
    }
    Ok(())
}
