//! The files a unified diff touches.

/// Every path a unified (git) diff creates, modifies, renames or deletes, in order of first
/// appearance, without the `a/`/`b/` prefixes. Quoted paths (with escapes) are not supported
/// and are returned as written.
///
/// ```
/// use uniagent_rewards::suite::patch_paths;
/// let diff = "diff --git a/tests/test_x.py b/tests/test_x.py\n--- a/tests/test_x.py\n+++ b/tests/test_x.py\n@@ -1 +1 @@\n-a\n+b\n";
/// assert_eq!(patch_paths(diff), ["tests/test_x.py"]);
/// ```
pub fn patch_paths(diff: &str) -> Vec<String> {
    let mut paths: Vec<String> = Vec::new();
    let mut add = |path: &str| {
        let path = path.split('\t').next().unwrap_or_default().trim_end();
        let path = path
            .strip_prefix("a/")
            .or_else(|| path.strip_prefix("b/"))
            .unwrap_or(path);
        if !path.is_empty() && path != "/dev/null" && !paths.iter().any(|p| p == path) {
            paths.push(path.to_owned());
        }
    };
    for line in diff.lines() {
        if let Some(rest) = line.strip_prefix("diff --git ") {
            // `a/<old> b/<new>`: split at the ` b/` that starts the second path.
            if let Some((old, new)) = rest.split_once(" b/") {
                add(old);
                add(new);
            }
        } else if let Some(rest) = line
            .strip_prefix("--- ")
            .or_else(|| line.strip_prefix("+++ "))
            .or_else(|| line.strip_prefix("rename from "))
            .or_else(|| line.strip_prefix("rename to "))
        {
            add(rest);
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_deleted_and_renamed_files() {
        let diff = "\
diff --git a/new.py b/new.py
new file mode 100644
--- /dev/null
+++ b/new.py
@@ -0,0 +1 @@
+x = 1
diff --git a/gone.py b/gone.py
deleted file mode 100644
--- a/gone.py
+++ /dev/null
@@ -1 +0,0 @@
-y = 2
diff --git a/old/name.py b/new/name.py
similarity index 100%
rename from old/name.py
rename to new/name.py
";
        assert_eq!(
            patch_paths(diff),
            ["new.py", "gone.py", "old/name.py", "new/name.py"]
        );
    }
}
