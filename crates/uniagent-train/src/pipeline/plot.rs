//! `learning_curve.png`: held-out success at every evaluation and the success rate of each RL
//! step's rollouts, with a title, axis labels and a legend. The text is drawn with the
//! bundled DejaVu Sans (`assets/fonts/`, licence beside it) through plotters' `ab_glyph`
//! support, so no system font or font library is needed.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use uniagent_core::{Error, Result};

const FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";
/// Size of the PNG.
const SIZE: (u32, u32) = (640, 400);

/// Registers the bundled font under the family the chart uses (idempotent).
fn register() -> Result<()> {
    register_font(FAMILY, FontStyle::Normal, FONT)
        .map_err(|_| Error::internal("the bundled DejaVu Sans is not a valid font"))
}

/// Draws the curve on any plotters backend.
fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    held_out: &[(usize, f64)],
    train: &[(usize, f64)],
    steps: usize,
) -> std::result::Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let x_max = steps.max(1) as f64;
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(root)
        .caption("Quickstart: success rate over RL steps", (FAMILY, 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_max, 0f64..1f64)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("RL step (0 = after SFT only)")
        .y_desc("success rate")
        .x_labels(steps.clamp(1, 10) + 1)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_labels(5)
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 16))
        .light_line_style(RGBColor(238, 238, 238))
        .bold_line_style(RGBColor(215, 215, 215))
        .draw()
        .map_err(|x| e(&x))?;
    let blue = RGBColor(90, 120, 230);
    chart
        .draw_series(LineSeries::new(
            train.iter().map(|&(s, r)| (s as f64, r)),
            blue.stroke_width(2),
        ))
        .map_err(|x| e(&x))?
        .label("training rollouts (per step)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], blue.stroke_width(2)));
    let red = RGBColor(220, 40, 40);
    chart
        .draw_series(LineSeries::new(
            held_out.iter().map(|&(s, r)| (s as f64, r)),
            red.stroke_width(3),
        ))
        .map_err(|x| e(&x))?
        .label("held-out tasks (evaluations)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], red.stroke_width(3)));
    chart
        .draw_series(
            held_out
                .iter()
                .map(|&(s, r)| Circle::new((s as f64, r), 5, red.filled())),
        )
        .map_err(|x| e(&x))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(180, 180, 180))
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))
}

/// `learning_curve.png` (640×400): held-out success at every evaluation (red, with points)
/// and the success rate of each RL step's rollouts (blue), from step 0 to `steps`, titled,
/// with labelled axes and a legend.
pub fn plot_learning_curve(
    path: &Path,
    held_out: &[(usize, f64)],
    train: &[(usize, f64)],
    steps: usize,
) -> Result<()> {
    register()?;
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    draw(&root, held_out, train, steps)
        .map_err(|e| Error::internal(format!("drawing {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dark pixels (text, axes, legend border) in the rows `rows` and columns `cols`.
    fn dark(buf: &[u8], rows: std::ops::Range<u32>, cols: std::ops::Range<u32>) -> usize {
        let w = SIZE.0;
        rows.flat_map(|y| cols.clone().map(move |x| ((y * w + x) * 3) as usize))
            .filter(|&i| buf[i] < 100 && buf[i + 1] < 100 && buf[i + 2] < 100)
            .count()
    }

    fn render(held_out: &[(usize, f64)], train: &[(usize, f64)]) -> Vec<u8> {
        register().unwrap();
        let mut buf = vec![0u8; (SIZE.0 * SIZE.1 * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, SIZE).into_drawing_area();
            draw(&root, held_out, train, 10).unwrap();
        }
        buf
    }

    #[test]
    fn the_png_has_a_title_axis_labels_and_a_legend() {
        let held = [(0, 0.2), (5, 0.5), (10, 0.8)];
        let train: Vec<(usize, f64)> = (1..=10).map(|s| (s, s as f64 / 12.0)).collect();
        let buf = render(&held, &train);
        let (w, h) = SIZE;
        // Title: dark glyphs in the top band, centred.
        assert!(dark(&buf, 0..40, w / 4..3 * w / 4) > 200, "no title");
        // y-axis description: glyphs in the leftmost strip.
        assert!(dark(&buf, h / 4..3 * h / 4, 0..24) > 50, "no y label");
        // x-axis description: glyphs in the bottom band.
        assert!(dark(&buf, h - 24..h, w / 4..3 * w / 4) > 100, "no x label");
        // Legend (upper left of the plot): its text is dark, above the curves.
        assert!(dark(&buf, 60..110, 100..320) > 150, "no legend");
        // The file itself is a PNG.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("curve.png");
        plot_learning_curve(&path, &held, &train, 10).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    }
}
