//! What the codec needs to know about a chat template's syntax, read with minijinja's own
//! parser (`minijinja::machinery`, the `unstable_machinery` feature), so that it is exactly the
//! syntax tree minijinja compiles: operator precedence, parentheses, string literals and
//! whitespace are minijinja's, not a pattern's guess.
//!
//! [`scan`] collects the filters a template names, its `{% autoescape %}` blocks, and the source
//! positions of every `+` and `~` operator (for [`super::markup`]'s rewrite).

use std::collections::BTreeSet;

use minijinja::machinery::{ast, parse};
use minijinja::syntax::SyntaxConfig;

/// A binary operator whose evaluation the markup emulation takes over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operator {
    /// `a + b`.
    Add,
    /// `a ~ b`.
    Concat,
}

impl Operator {
    /// The operator's token.
    pub(crate) fn token(self) -> char {
        match self {
            Self::Add => '+',
            Self::Concat => '~',
        }
    }
}

/// One `left OP right` expression: byte offsets into the scanned source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OperatorSite {
    /// Which operator.
    pub op: Operator,
    /// Where the whole expression starts (the first token of `left`, its opening parentheses
    /// included).
    pub start: usize,
    /// Where `left`'s own last token ends (a closing parenthesis around `left` may follow).
    pub left_end: usize,
    /// Where the whole expression ends (the last token of `right`, closing parentheses around
    /// `right` included).
    pub end: usize,
}

/// A `{% autoescape %}` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AutoEscapeSite {
    /// Byte offset of the block's expression in the scanned source.
    pub at: usize,
    /// Whether the block's argument is a constant that turns escaping off (`false`, `none`).
    pub statically_off: bool,
}

/// The facts [`scan`] reads from a template.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// The names of the filters the template applies (`x|name`, `{% filter name %}`).
    pub filters: BTreeSet<String>,
    /// Every string constant in the template's expressions (a filter can also be named by a
    /// string: `xs|map('safe')`).
    pub strings: BTreeSet<String>,
    /// The `{% autoescape %}` blocks.
    pub autoescape: Vec<AutoEscapeSite>,
    /// Every `+` and `~` expression, in source order of their start (outer before inner).
    pub operators: Vec<OperatorSite>,
}

/// Scans `source` as minijinja parses it with `syntax`; the parser's error if it does not parse.
pub(crate) fn scan(source: &str, syntax: SyntaxConfig) -> Result<Scan, minijinja::Error> {
    let tree = parse(source, "<chat_template>", syntax)?;
    let mut scan = Scan::default();
    scan.stmt(&tree);
    scan.operators
        .sort_by_key(|s| (s.start, std::cmp::Reverse(s.end)));
    Ok(scan)
}

/// The value of a `Const` expression, if `expr` is one.
fn constant(expr: &ast::Expr<'_>) -> Option<minijinja::Value> {
    match expr {
        ast::Expr::Const(c) => Some(c.value.clone()),
        _ => None,
    }
}

impl Scan {
    fn stmts(&mut self, stmts: &[ast::Stmt<'_>]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    // Every statement kind is listed (no catch-all): a minijinja release with a new kind of
    // statement fails to compile here instead of hiding expressions from the scan.
    fn stmt(&mut self, stmt: &ast::Stmt<'_>) {
        match stmt {
            ast::Stmt::Template(t) => self.stmts(&t.children),
            ast::Stmt::EmitExpr(e) => self.expr(&e.expr),
            ast::Stmt::EmitRaw(_) | ast::Stmt::Continue(_) | ast::Stmt::Break(_) => {}
            ast::Stmt::ForLoop(f) => {
                self.expr(&f.target);
                self.expr(&f.iter);
                if let Some(e) = &f.filter_expr {
                    self.expr(e);
                }
                self.stmts(&f.body);
                self.stmts(&f.else_body);
            }
            ast::Stmt::IfCond(i) => {
                self.expr(&i.expr);
                self.stmts(&i.true_body);
                self.stmts(&i.false_body);
            }
            ast::Stmt::WithBlock(w) => {
                for (target, value) in &w.assignments {
                    self.expr(target);
                    self.expr(value);
                }
                self.stmts(&w.body);
            }
            ast::Stmt::Set(s) => {
                self.expr(&s.target);
                self.expr(&s.expr);
            }
            ast::Stmt::SetBlock(s) => {
                self.expr(&s.target);
                if let Some(f) = &s.filter {
                    self.expr(f);
                }
                self.stmts(&s.body);
            }
            ast::Stmt::AutoEscape(a) => {
                let statically_off = constant(&a.enabled).is_some_and(|v| {
                    v.is_none() || (v.kind() == minijinja::value::ValueKind::Bool && !v.is_true())
                });
                self.autoescape.push(AutoEscapeSite {
                    at: a.enabled.span().start_offset as usize,
                    statically_off,
                });
                self.expr(&a.enabled);
                self.stmts(&a.body);
            }
            ast::Stmt::FilterBlock(f) => {
                self.expr(&f.filter);
                self.stmts(&f.body);
            }
            ast::Stmt::Block(b) => self.stmts(&b.body),
            ast::Stmt::Import(i) => {
                self.expr(&i.expr);
                self.expr(&i.name);
            }
            ast::Stmt::FromImport(i) => {
                self.expr(&i.expr);
                for (name, alias) in &i.names {
                    self.expr(name);
                    if let Some(a) = alias {
                        self.expr(a);
                    }
                }
            }
            ast::Stmt::Extends(e) => self.expr(&e.name),
            ast::Stmt::Include(i) => self.expr(&i.name),
            ast::Stmt::Macro(m) => self.macro_decl(m),
            ast::Stmt::CallBlock(c) => {
                self.call(&c.call);
                self.macro_decl(&c.macro_decl);
            }
            ast::Stmt::Do(d) => self.call(&d.call),
        }
    }

    fn macro_decl(&mut self, m: &ast::Macro<'_>) {
        for e in m.args.iter().chain(&m.defaults) {
            self.expr(e);
        }
        self.stmts(&m.body);
    }

    fn call(&mut self, c: &ast::Call<'_>) {
        self.expr(&c.expr);
        self.args(&c.args);
    }

    fn args(&mut self, args: &[ast::CallArg<'_>]) {
        for a in args {
            match a {
                ast::CallArg::Pos(e)
                | ast::CallArg::Kwarg(_, e)
                | ast::CallArg::PosSplat(e)
                | ast::CallArg::KwargSplat(e) => self.expr(e),
            }
        }
    }

    // As for statements, every expression kind is listed.
    fn expr(&mut self, expr: &ast::Expr<'_>) {
        match expr {
            ast::Expr::Var(_) => {}
            ast::Expr::Const(c) => {
                if let Some(s) = c.value.as_str() {
                    self.strings.insert(s.to_owned());
                }
            }
            ast::Expr::Slice(s) => {
                self.expr(&s.expr);
                for e in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                    self.expr(e);
                }
            }
            ast::Expr::UnaryOp(u) => self.expr(&u.expr),
            ast::Expr::BinOp(b) => {
                let op = match b.op {
                    ast::BinOpKind::Add => Some(Operator::Add),
                    ast::BinOpKind::Concat => Some(Operator::Concat),
                    _ => None,
                };
                if let Some(op) = op {
                    let span = b.span();
                    self.operators.push(OperatorSite {
                        op,
                        start: span.start_offset as usize,
                        left_end: b.left.span().end_offset as usize,
                        end: span.end_offset as usize,
                    });
                }
                self.expr(&b.left);
                self.expr(&b.right);
            }
            ast::Expr::Compare(c) => {
                self.expr(&c.expr);
                for op in &c.ops {
                    self.expr(&op.expr);
                }
            }
            ast::Expr::IfExpr(i) => {
                self.expr(&i.test_expr);
                self.expr(&i.true_expr);
                if let Some(e) = &i.false_expr {
                    self.expr(e);
                }
            }
            ast::Expr::Filter(f) => {
                self.filters.insert(f.name.to_owned());
                if let Some(e) = &f.expr {
                    self.expr(e);
                }
                self.args(&f.args);
            }
            ast::Expr::Test(t) => {
                self.expr(&t.expr);
                self.args(&t.args);
            }
            ast::Expr::GetAttr(g) => self.expr(&g.expr),
            ast::Expr::GetItem(g) => {
                self.expr(&g.expr);
                self.expr(&g.subscript_expr);
            }
            ast::Expr::Call(c) => self.call(c),
            ast::Expr::List(l) => {
                for e in &l.items {
                    self.expr(e);
                }
            }
            ast::Expr::Tuple(t) => {
                for e in &t.items {
                    self.expr(e);
                }
            }
            ast::Expr::Map(m) => {
                for e in m.keys.iter().chain(&m.values) {
                    self.expr(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sites(source: &str) -> Vec<(Operator, &str, &str)> {
        let scan = scan(source, SyntaxConfig::default()).unwrap();
        scan.operators
            .iter()
            .map(|s| (s.op, &source[s.start..s.left_end], &source[s.start..s.end]))
            .collect()
    }

    #[test]
    fn operators_are_found_with_the_parsers_precedence() {
        let src = "{{ 'a'|safe + b ~ c|upper + (d + e) }}";
        assert_eq!(
            sites(src),
            vec![
                (
                    Operator::Add,
                    "'a'|safe + b ~ c|upper",
                    "'a'|safe + b ~ c|upper + (d + e)"
                ),
                (Operator::Add, "'a'|safe", "'a'|safe + b ~ c|upper"),
                (Operator::Concat, "b", "b ~ c|upper"),
                (Operator::Add, "d", "d + e"),
            ]
        );
    }

    #[test]
    fn statements_filters_strings_and_autoescape_are_scanned() {
        let src = "{% set x = y|map('safe')|list %}{% for a in b if a + 1 %}{% endfor %}\
                   {% macro m(p=q + r) %}{% endmacro %}{% filter upper %}{% endfilter %}\
                   {% autoescape false %}{% endautoescape %}{% autoescape true %}{% endautoescape %}";
        let scan = scan(src, SyntaxConfig::default()).unwrap();
        assert_eq!(
            scan.filters.iter().map(String::as_str).collect::<Vec<_>>(),
            ["list", "map", "upper"]
        );
        assert!(scan.strings.contains("safe"));
        assert_eq!(scan.operators.len(), 2);
        assert_eq!(
            scan.autoescape
                .iter()
                .map(|a| a.statically_off)
                .collect::<Vec<_>>(),
            [true, false]
        );
    }

    #[test]
    fn a_template_that_does_not_parse_is_an_error() {
        assert!(scan("{{ a + }}", SyntaxConfig::default()).is_err());
    }
}
