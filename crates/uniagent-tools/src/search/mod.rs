//! `search`: ranked retrieval (BM25) over a local document corpus, for search-QA tasks.
//!
//! The index is built once ([`Bm25Builder`], e.g. from a JSON Lines corpus), saved in the
//! format described in [`index`], and shared by every rollout; the tool runs in-process and
//! needs no sandbox.

pub mod index;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};
use uniagent_core::{Result, Tool, ToolContext, ToolOutput, ToolSpec};

pub use index::{tokenize, Bm25Builder, Bm25Index, Document, Hit};

use crate::toolbox::truncate::truncate_head;

/// The `search` tool over a [`Bm25Index`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> uniagent_core::Result<()> {
/// use std::sync::Arc;
/// use uniagent_core::{Task, Tool, ToolContext};
/// use uniagent_tools::search::{Bm25Builder, Document, SearchTool};
///
/// let doc = Document { id: "1".into(), title: "Paris".into(), text: "Paris is the capital of France.".into(), url: None };
/// let tool = SearchTool::new(Arc::new(Bm25Builder::new().add_document(doc).build()?));
/// let ctx = ToolContext { deployment: None, session: "default".into(), timeout: std::time::Duration::from_secs(5),
///     task: Arc::new(Task::new("t", vec![])), call_id: "c1".into(),
///     rollout_id: "t:0".into() };
/// let out = tool.call(serde_json::json!({"query_list": ["capital of France"]}), &ctx).await?;
/// assert!(out.content.contains("Title: Paris"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SearchTool {
    index: Arc<Bm25Index>,
    /// Results per query when the model does not say.
    pub default_top_k: usize,
    /// The most results per query the model may ask for.
    pub max_top_k: usize,
    /// Characters of each document's text shown.
    pub snippet_chars: usize,
}

impl SearchTool {
    /// A search tool over `index` (3 results per query by default, at most 10, 500-character
    /// snippets).
    pub fn new(index: Arc<Bm25Index>) -> Self {
        Self {
            index,
            default_top_k: 3,
            max_top_k: 10,
            snippet_chars: 500,
        }
    }

    fn format_query(&self, query: &str, top_k: usize) -> String {
        let hits = self.index.search(query, top_k);
        let mut out = format!("Query: {query}\nFound {} results:\n", hits.len());
        for (rank, hit) in hits.iter().enumerate() {
            let doc = hit.document;
            let snippet = truncate_head(doc.text.trim(), self.snippet_chars, " ...");
            out.push_str(&format!(
                "{}. id: {}\nurl: {}\nTitle: {}\nScore: {:.4}\nSnippet: {snippet}\n",
                rank + 1,
                doc.id,
                doc.url.as_deref().unwrap_or("-"),
                doc.title,
                hit.score
            ));
        }
        out
    }
}

#[async_trait]
impl Tool for SearchTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(
            "search",
            "Search the document collection. Give one or more short keyword queries; each returns the best \
             matching documents (title, snippet, relevance score), best first. Matching is by words, so use the \
             distinctive words you expect in a relevant document; try rephrasing if nothing useful comes back.",
            json!({
                "type": "object",
                "properties": {
                    "query_list": {"type": "array", "items": {"type": "string"}, "description": "One or more search queries."},
                    "topk": {"type": "integer", "description": "Results per query (default 3, at most 10)."}
                },
                "required": ["query_list"]
            }),
        )
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput> {
        let queries: Vec<String> = match args.get("query_list").or_else(|| args.get("query")) {
            Some(Value::String(q)) => vec![q.clone()],
            Some(Value::Array(items)) => match items
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect()
            {
                Some(queries) => queries,
                None => {
                    return Ok(ToolOutput::failed(
                        "`query_list` must be a list of strings.",
                    ))
                }
            },
            _ => {
                return Ok(ToolOutput::failed(
                    "search needs `query_list`, a list of query strings.",
                ))
            }
        };
        let queries: Vec<&str> = queries
            .iter()
            .map(|q| q.trim())
            .filter(|q| !q.is_empty())
            .collect();
        if queries.is_empty() {
            return Ok(ToolOutput::failed("`query_list` holds no non-empty query."));
        }
        let top_k = match args.get("topk") {
            None | Some(Value::Null) => self.default_top_k,
            Some(v) => match v.as_u64().filter(|&k| k >= 1) {
                Some(k) => usize::try_from(k).unwrap_or(usize::MAX).min(self.max_top_k),
                None => return Ok(ToolOutput::failed("`topk` must be a positive integer.")),
            },
        };
        let blocks: Vec<String> = queries
            .iter()
            .map(|q| self.format_query(q, top_k))
            .collect();
        Ok(ToolOutput::success(blocks.join("\n---\n")))
    }
}
