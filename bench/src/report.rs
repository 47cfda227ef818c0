//! The report: every line is printed as it is written and kept for
//! `results.md`; every table and figure also goes, as numbers, into
//! `results.json`. Times are whole processes in nanoseconds, shown as the
//! median, p10 and p90 (µs, or ms from 1000 µs on).

use crate::timer::{Samples, Spec};
use serde::Serialize;
use serde_json::{json, Value};
use std::path::Path;

/// The spread of one entry's samples.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Stats {
    pub n: usize,
    pub median_us: f64,
    pub p10_us: f64,
    pub p90_us: f64,
}

/// The spread of `v` (nanoseconds), in µs.
pub fn stats(v: &[u64]) -> Stats {
    let mut s = v.to_vec();
    s.sort_unstable();
    let at = |q: f64| -> f64 {
        if s.is_empty() {
            return f64::NAN;
        }
        let i = ((s.len() - 1) as f64 * q).round() as usize;
        s[i] as f64 / 1000.0
    };
    Stats {
        n: s.len(),
        median_us: at(0.5),
        p10_us: at(0.1),
        p90_us: at(0.9),
    }
}

/// What a run has reported so far: the markdown, and the same as JSON.
#[derive(Default)]
pub struct Report {
    pub md: String,
    pub json: serde_json::Map<String, Value>,
}

impl Report {
    /// Prints `s` and keeps it for `results.md`.
    pub fn line(&mut self, s: &str) {
        println!("{s}");
        self.md.push_str(s);
        self.md.push('\n');
    }

    /// A table of `samples` and the ratios named in `ratios` (label A, label B, target text).
    pub fn pair(
        &mut self,
        title: &str,
        key: &str,
        spec: &Spec,
        samples: &Samples,
        ratios: &[(&str, &str, &str)],
    ) {
        self.line(&format!("\n### {title}\n"));
        self.line("| command | n | median | p10 | p90 |");
        self.line("|---|---:|---:|---:|---:|");
        let mut js = serde_json::Map::new();
        for label in spec.entries.iter().map(|e| e.label.as_str()) {
            let st = stats(&samples[label]);
            self.stats_row(label, &st);
            js.insert(label.to_string(), json!(st));
        }
        self.line("");
        let mut rs = Vec::new();
        for (a, b, target) in ratios {
            let (sa, sb) = (stats(&samples[*a]), stats(&samples[*b]));
            let r = sa.median_us / sb.median_us;
            let d = sa.median_us - sb.median_us;
            self.line(&format!(
                "* {a} / {b}: **{r:.2}×** (median difference {}){}",
                fmt_us(d),
                if target.is_empty() {
                    String::new()
                } else {
                    format!("; target {target}")
                }
            ));
            rs.push(json!({"a": a, "b": b, "ratio": r, "diff_us": d, "target": target}));
        }
        js.insert("ratios".into(), Value::Array(rs));
        self.json.insert(key.into(), Value::Object(js));
    }

    /// One row of a `| what | n | median | p10 | p90 |` table.
    pub fn stats_row(&mut self, what: &str, st: &Stats) {
        self.line(&format!(
            "| {what} | {} | {} | {} | {} |",
            st.n,
            fmt_us(st.median_us),
            fmt_us(st.p10_us),
            fmt_us(st.p90_us)
        ));
    }

    /// Writes `results.md` and `results.json` into `out`, and says so.
    pub fn write(self, out: &Path) -> Result<(), String> {
        std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
        std::fs::write(out.join("results.md"), &self.md).map_err(|e| e.to_string())?;
        std::fs::write(
            out.join("results.json"),
            serde_json::to_vec_pretty(&Value::Object(self.json)).map_err(|e| e.to_string())?,
        )
        .map_err(|e| e.to_string())?;
        println!("\nwritten: {}/results.{{md,json}}", out.display());
        Ok(())
    }
}

/// `us` as `N µs`, or `N.NN ms` from 1000 µs on.
pub fn fmt_us(us: f64) -> String {
    if us.abs() >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::entry;

    #[test]
    fn times_from_1000_us_on_are_shown_in_ms() {
        assert_eq!(fmt_us(999.4), "999 µs");
        assert_eq!(fmt_us(1500.0), "1.50 ms");
        assert_eq!(fmt_us(-2000.0), "-2.00 ms");
    }

    #[test]
    fn a_pair_is_a_table_of_its_entries_then_its_ratios() {
        let spec = Spec {
            rounds: 2,
            warmup: 0,
            entries: vec![entry("a", vec![], None), entry("b", vec![], None)],
        };
        let samples: Samples = [
            ("a".to_string(), vec![2_000_000, 2_000_000]),
            ("b".to_string(), vec![1_000_000, 1_000_000]),
        ]
        .into();
        let mut rep = Report::default();
        rep.pair(
            "T",
            "k",
            &spec,
            &samples,
            &[("a", "b", "≤ 1.10×"), ("b", "a", "")],
        );
        assert_eq!(
            rep.md,
            "\n### T\n\n\
             | command | n | median | p10 | p90 |\n\
             |---|---:|---:|---:|---:|\n\
             | a | 2 | 2.00 ms | 2.00 ms | 2.00 ms |\n\
             | b | 2 | 1.00 ms | 1.00 ms | 1.00 ms |\n\
             \n\
             * a / b: **2.00×** (median difference 1.00 ms); target ≤ 1.10×\n\
             * b / a: **0.50×** (median difference -1.00 ms)\n"
        );
        assert_eq!(rep.json["k"]["ratios"][0]["ratio"], 2.0);
        assert_eq!(rep.json["k"]["a"]["n"], 2);
    }
}
