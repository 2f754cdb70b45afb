//! Fitting a cluster calibration to measured step times: only the factors the runs can
//! identify, checked by leaving each run out.
//!
//! A factor is identifiable when the predicted step of some run moves with it (sensitivity)
//! and the runs move it differently from every factor already chosen (independence: with one
//! run, or with runs that all spend the same share of their step in GEMMs and in attention,
//! GEMM and attention throughput cannot be told apart). At most one factor per run beyond the
//! first is fitted, so that every fit can be checked on a run it did not see.

use serde::Serialize;

use super::cluster_calibration::{CalibrationFactors, Factor, FACTOR_RANGE, TIME_FACTORS};
use super::{evaluate, Architecture, CostConstants, Hardware, TrainingConfig};

/// Relative step used to measure how the step time responds to a factor.
const PROBE_STEP: f64 = 0.1;
/// A factor whose 1% change moves no run's predicted step by this fraction of 1% cannot be
/// measured by these runs (measured step times are noisy by a few percent).
const MIN_SENSITIVITY: f64 = 0.05;
/// Part of a factor's response that must remain once the responses of the factors already
/// chosen are projected out; below it the runs cannot tell the two apart.
const MIN_INDEPENDENCE: f64 = 0.35;
const MAX_ITERATIONS: usize = 30;
/// Levenberg–Marquardt damping of the Gauss–Newton steps (log-factor units).
const DAMPING: f64 = 1e-3;

/// One measured run: its model, configuration and steady-state step time.
#[derive(Debug, Clone)]
pub struct FitRun<'a> {
    pub name: String,
    pub arch: &'a Architecture,
    pub config: TrainingConfig,
    pub measured_step_s: f64,
}

/// What the fit decided about one factor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FactorVerdict {
    pub name: &'static str,
    pub meaning: &'static str,
    /// The fitted multiplier; `None` when the factor was refused (it stays 1).
    pub fitted: Option<f64>,
    /// Largest change of a run's predicted step per change of the factor (d ln T / d ln f).
    pub sensitivity: f64,
    /// Why it was fitted or refused.
    pub reason: String,
}

/// One run's step time: measured, predicted with the cards, after the fit, and predicted by a
/// fit that did not see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunFit {
    pub name: String,
    pub measured_step_s: f64,
    pub predicted_before_s: f64,
    pub predicted_after_s: f64,
    pub error_before_pct: f64,
    pub error_after_pct: f64,
    /// Leave-one-out: predicted by the factors fitted on the other runs.
    pub held_out_predicted_s: Option<f64>,
    pub held_out_error_pct: Option<f64>,
}

/// The outcome of a fit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterFit {
    pub factors: CalibrationFactors,
    pub verdicts: Vec<FactorVerdict>,
    pub runs: Vec<RunFit>,
    pub median_abs_error_before_pct: f64,
    pub median_abs_error_after_pct: f64,
    /// Median absolute leave-one-out error; `None` with a single run.
    pub median_abs_held_out_error_pct: Option<f64>,
    /// Runs left out of the fit and why (no prediction, no measured step).
    pub excluded: Vec<String>,
}

fn predict(runs: &[FitRun], hw: &Hardware, k: &CostConstants, f: &CalibrationFactors) -> Vec<f64> {
    let (hw, k) = f.apply(hw, k);
    runs.iter()
        .map(|run| {
            evaluate(run.arch, &hw, &k, &run.config)
                .performance
                .step_time_s
        })
        .collect()
}

fn pct(predicted: f64, measured: f64) -> f64 {
    ((predicted - measured) / measured * 1000.0).round() / 10.0
}

fn median_abs(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.map(f64::abs).collect();
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// d ln T_i / d ln f for one factor around `at`, per run.
fn sensitivity(
    runs: &[FitRun],
    hw: &Hardware,
    k: &CostConstants,
    at: &CalibrationFactors,
    factor: &Factor,
) -> Vec<f64> {
    let base = factor.get(at);
    let mut up = *at;
    factor.set(&mut up, base * (1.0 + PROBE_STEP));
    let mut down = *at;
    factor.set(&mut down, base / (1.0 + PROBE_STEP));
    let span = 2.0 * (1.0 + PROBE_STEP).ln();
    predict(runs, hw, k, &up)
        .into_iter()
        .zip(predict(runs, hw, k, &down))
        .map(|(high, low)| {
            if high > 0.0 && low > 0.0 {
                (high.ln() - low.ln()) / span
            } else {
                0.0
            }
        })
        .collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Solves `a x = b` for a small dense system (Gaussian elimination, partial pivoting).
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for col in 0..n {
        let pivot = (col..n).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        let (upper, lower) = a.split_at_mut(col + 1);
        let pivot_row = &upper[col];
        for (offset, row) in lower.iter_mut().enumerate() {
            let ratio = row[col] / pivot_row[col];
            for (value, pivot_value) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                *value -= ratio * pivot_value;
            }
            b[col + 1 + offset] -= ratio * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let rest: f64 = (row + 1..n).map(|c| a[row][c] * x[c]).sum();
        x[row] = (b[row] - rest) / a[row][row];
    }
    Some(x)
}

fn log_residuals(predicted: &[f64], runs: &[FitRun]) -> Vec<f64> {
    predicted
        .iter()
        .zip(runs)
        .map(|(p, run)| p.max(1e-12).ln() - run.measured_step_s.ln())
        .collect()
}

/// Least squares in log step time over the chosen factors (damped Gauss–Newton), each
/// factor kept inside [`FACTOR_RANGE`].
fn fit_factors(
    runs: &[FitRun],
    hw: &Hardware,
    k: &CostConstants,
    chosen: &[Factor],
) -> CalibrationFactors {
    let mut at = CalibrationFactors::default();
    if chosen.is_empty() || runs.is_empty() {
        return at;
    }
    let (low, high) = FACTOR_RANGE;
    for _ in 0..MAX_ITERATIONS {
        let residuals = log_residuals(&predict(runs, hw, k, &at), runs);
        let jacobian: Vec<Vec<f64>> = chosen
            .iter()
            .map(|factor| sensitivity(runs, hw, k, &at, factor))
            .collect();
        let size = chosen.len();
        let mut normal = vec![vec![0.0; size]; size];
        let mut rhs = vec![0.0; size];
        for a in 0..size {
            for b in 0..size {
                normal[a][b] = dot(&jacobian[a], &jacobian[b]);
            }
            normal[a][a] += DAMPING * (1.0 + normal[a][a]);
            rhs[a] = -dot(&jacobian[a], &residuals);
        }
        let Some(step) = solve(normal, rhs) else {
            break;
        };
        let mut largest = 0.0f64;
        for (factor, delta) in chosen.iter().zip(&step) {
            let delta = delta.clamp(-0.7, 0.7);
            largest = largest.max(delta.abs());
            let value = (factor.get(&at) * delta.exp()).clamp(low, high);
            factor.set(&mut at, value);
        }
        if largest < 1e-5 {
            break;
        }
    }
    at
}

/// Chooses the identifiable factors, fits them, and checks the fit run by run.
pub fn fit_cluster(runs: &[FitRun], hw: &Hardware, k: &CostConstants) -> ClusterFit {
    let base = CalibrationFactors::default();
    let before_all = predict(runs, hw, k, &base);
    let mut excluded = Vec::new();
    let usable: Vec<FitRun> = runs
        .iter()
        .zip(&before_all)
        .filter_map(|(run, &predicted)| {
            if !(run.measured_step_s.is_finite() && run.measured_step_s > 0.0) {
                excluded.push(format!("{}: no measured step time", run.name));
                None
            } else if !(predicted.is_finite() && predicted > 0.0) {
                excluded.push(format!(
                    "{}: the model has no step time for it (layout violation?)",
                    run.name
                ));
                None
            } else {
                Some(run.clone())
            }
        })
        .collect();
    let runs = usable.as_slice();
    let count = runs.len();
    let most_factors = if count <= 1 { count } else { count - 1 };

    // Each factor's response over the runs, most responsive first.
    let mut candidates: Vec<(Factor, Vec<f64>, f64)> = TIME_FACTORS
        .iter()
        .map(|factor| {
            let column = sensitivity(runs, hw, k, &base, factor);
            let largest = column.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            (*factor, column, largest)
        })
        .collect();
    candidates.sort_by(|a, b| b.2.total_cmp(&a.2));

    let mut chosen: Vec<Factor> = Vec::new();
    let mut basis: Vec<Vec<f64>> = Vec::new();
    let mut verdicts = Vec::new();
    for (factor, column, largest) in &candidates {
        let mut residual = column.clone();
        let mut closest: Option<(&'static str, f64)> = None;
        for (other, direction) in chosen.iter().zip(&basis) {
            let overlap = dot(&residual, direction);
            residual
                .iter_mut()
                .zip(direction)
                .for_each(|(r, d)| *r -= overlap * d);
            if closest.is_none_or(|(_, o)| overlap.abs() > o) {
                closest = Some((other.name, overlap.abs()));
            }
        }
        let norm = dot(column, column).sqrt();
        let independent = dot(&residual, &residual).sqrt();
        let reason = if count == 0 {
            Some("no usable run".to_owned())
        } else if *largest < MIN_SENSITIVITY {
            Some(format!(
                "these runs cannot measure it: a 10% change moves no run's predicted step by more than {:.1}%",
                largest * 10.0
            ))
        } else if independent < MIN_INDEPENDENCE * norm {
            let other = closest.map_or("another factor", |(name, _)| name);
            Some(if count == 1 {
                format!("one run cannot tell it from `{other}`: both only scale the same step time; add runs that spend different shares of their step on each")
            } else {
                format!("these runs cannot tell it from `{other}`: every run changes with both in the same proportion; add a run with a different balance (sequence length, EP span, microbatches)")
            })
        } else if chosen.len() >= most_factors {
            Some(format!(
                "{count} run{} can identify at most {most_factors} factor{} with a run left out to check each fit; add runs",
                if count == 1 { "" } else { "s" },
                if most_factors == 1 { "" } else { "s" }
            ))
        } else {
            None
        };
        match reason {
            Some(reason) => verdicts.push(FactorVerdict {
                name: factor.name,
                meaning: factor.meaning,
                fitted: None,
                sensitivity: (*largest * 100.0).round() / 100.0,
                reason,
            }),
            None => {
                let unit: Vec<f64> = residual.iter().map(|r| r / independent).collect();
                basis.push(unit);
                chosen.push(*factor);
                verdicts.push(FactorVerdict {
                    name: factor.name,
                    meaning: factor.meaning,
                    fitted: Some(1.0),
                    sensitivity: (*largest * 100.0).round() / 100.0,
                    reason: format!(
                        "identifiable: a 10% change moves a run's step by up to {:.1}%",
                        largest * 10.0
                    ),
                });
            }
        }
    }

    let factors = fit_factors(runs, hw, k, &chosen);
    for verdict in &mut verdicts {
        if verdict.fitted.is_some() {
            if let Some(factor) = TIME_FACTORS.iter().find(|f| f.name == verdict.name) {
                verdict.fitted = Some((factor.get(&factors) * 1000.0).round() / 1000.0);
            }
        }
    }
    let before = predict(runs, hw, k, &base);
    let after = predict(runs, hw, k, &factors);
    let held_out: Vec<Option<f64>> = (0..count)
        .map(|left_out| {
            if count < 2 {
                return None;
            }
            let others: Vec<FitRun> = runs
                .iter()
                .enumerate()
                .filter(|(index, _)| *index != left_out)
                .map(|(_, run)| run.clone())
                .collect();
            let fitted = fit_factors(&others, hw, k, &chosen);
            predict(&runs[left_out..=left_out], hw, k, &fitted)
                .first()
                .copied()
        })
        .collect();
    let fits: Vec<RunFit> = runs
        .iter()
        .enumerate()
        .map(|(index, run)| {
            let measured = run.measured_step_s;
            let held = held_out[index];
            RunFit {
                name: run.name.clone(),
                measured_step_s: measured,
                predicted_before_s: (before[index] * 1000.0).round() / 1000.0,
                predicted_after_s: (after[index] * 1000.0).round() / 1000.0,
                error_before_pct: pct(before[index], measured),
                error_after_pct: pct(after[index], measured),
                held_out_predicted_s: held.map(|h| (h * 1000.0).round() / 1000.0),
                held_out_error_pct: held.map(|h| pct(h, measured)),
            }
        })
        .collect();
    ClusterFit {
        factors,
        verdicts,
        median_abs_error_before_pct: median_abs(fits.iter().map(|f| f.error_before_pct)),
        median_abs_error_after_pct: median_abs(fits.iter().map(|f| f.error_after_pct)),
        median_abs_held_out_error_pct: (count >= 2)
            .then(|| median_abs(fits.iter().filter_map(|f| f.held_out_error_pct))),
        runs: fits,
        excluded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solves_a_small_system() {
        let x = solve(vec![vec![2.0, 1.0], vec![1.0, 3.0]], vec![3.0, 5.0]).expect("solution");
        assert!(
            (x[0] - 0.8).abs() < 1e-12 && (x[1] - 1.4).abs() < 1e-12,
            "{x:?}"
        );
        assert!(solve(vec![vec![1.0, 2.0], vec![2.0, 4.0]], vec![1.0, 2.0]).is_none());
    }

    #[test]
    fn median_of_absolute_values() {
        assert_eq!(median_abs([-3.0, 1.0, 2.0].into_iter()), 2.0);
        assert_eq!(median_abs([-4.0, 1.0, 2.0, 3.0].into_iter()), 2.5);
        assert_eq!(median_abs(std::iter::empty()), 0.0);
    }
}
