//! The wildcards of a policy's device, port and host patterns.

/// `*` (any run) and `?` (one character) wildcards; everything else literal.
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn glob_matches_like_a_shell() {
        assert!(glob("mlx5_*", "mlx5_0"));
        assert!(glob("mlx5_*/1", "mlx5_12/1"));
        assert!(!glob("mlx5_*/1", "mlx5_12/2"));
        assert!(glob("mlx5_?", "mlx5_7"));
        assert!(!glob("mlx5_?", "mlx5_10"));
        assert!(glob("*", ""));
        assert!(!glob("a", ""));
        assert!(glob("0000:18:00.0", "0000:18:00.0"));
    }

    proptest! {
        #[test]
        fn a_literal_pattern_matches_only_itself(a in "[a-z0-9_./]{0,12}", b in "[a-z0-9_./]{0,12}") {
            prop_assert_eq!(glob(&a, &b), a == b);
            prop_assert!(glob("*", &b));
            let star_prefix = format!("{a}*");
            let joined = format!("{a}{b}");
            prop_assert!(glob(&star_prefix, &joined));
        }
    }
}
