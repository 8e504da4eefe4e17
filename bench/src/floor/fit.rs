//! Postgres CPU per request = a·rows + b·statements, fitted by least squares over the
//! journal floor's batch sizes.

use serde::Serialize;

/// One batch size's figures, per request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    /// Rows a request writes (its claim's and its finalize's).
    pub rows: f64,
    /// The statements a request's share comes to (2/K at K rows per statement).
    pub statements: f64,
    /// Postgres CPU per request, microseconds.
    pub cpu_us: f64,
}

/// What a row and what a statement (with its commit) cost Postgres.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fit {
    /// Microseconds of Postgres CPU per row written.
    pub a_us_per_row: f64,
    /// Microseconds of Postgres CPU per statement, each its own transaction and commit.
    pub b_us_per_statement: f64,
}

impl Fit {
    /// The fitted CPU per request of `rows` rows and `statements` statements.
    pub fn cpu_us(&self, rows: f64, statements: f64) -> f64 {
        self.a_us_per_row * rows + self.b_us_per_statement * statements
    }
}

/// The least-squares `a` and `b` of `cpu_us = a·rows + b·statements` (no intercept: a
/// request that writes nothing costs nothing); `None` when the points cannot tell rows
/// from statements (fewer than two distinct ratios).
pub fn fit(points: &[Point]) -> Option<Fit> {
    let sum = |f: &dyn Fn(&Point) -> f64| points.iter().map(f).sum::<f64>();
    let rr = sum(&|p| p.rows * p.rows);
    let rs = sum(&|p| p.rows * p.statements);
    let ss = sum(&|p| p.statements * p.statements);
    let ry = sum(&|p| p.rows * p.cpu_us);
    let sy = sum(&|p| p.statements * p.cpu_us);
    let det = rr * ss - rs * rs;
    if det.abs() <= f64::EPSILON * rr * ss {
        return None;
    }
    Some(Fit {
        a_us_per_row: (ry * ss - sy * rs) / det,
        b_us_per_statement: (rr * sy - rs * ry) / det,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(k: f64, cpu_us: f64) -> Point {
        Point {
            rows: 2.0,
            statements: 2.0 / k,
            cpu_us,
        }
    }

    #[test]
    fn exact_points_give_back_their_coefficients() {
        // 20 µs a row, 150 µs a statement.
        let points: Vec<Point> = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
            .iter()
            .map(|&k| point(k, 40.0 + 300.0 / k))
            .collect();
        let fit = fit(&points).expect("two distinct ratios");
        assert!((fit.a_us_per_row - 20.0).abs() < 1e-9, "{fit:?}");
        assert!((fit.b_us_per_statement - 150.0).abs() < 1e-9, "{fit:?}");
        assert!((fit.cpu_us(2.0, 2.0 / 32.0) - (40.0 + 300.0 / 32.0)).abs() < 1e-9);
    }

    #[test]
    fn noisy_points_are_fitted_by_least_squares() {
        // Symmetric noise around a = 10, b = 100 leaves the fit between the extremes.
        let points = [
            point(1.0, 220.0 + 5.0),
            point(2.0, 120.0 - 5.0),
            point(4.0, 70.0 + 5.0),
            point(8.0, 45.0 - 5.0),
        ];
        let fit = fit(&points).expect("fits");
        assert!((fit.a_us_per_row - 10.0).abs() < 3.0, "{fit:?}");
        assert!((fit.b_us_per_statement - 100.0).abs() < 6.0, "{fit:?}");
    }

    #[test]
    fn one_batch_size_cannot_tell_rows_from_statements() {
        assert_eq!(fit(&[point(4.0, 70.0), point(4.0, 72.0)]), None);
        assert_eq!(fit(&[]), None);
    }
}
