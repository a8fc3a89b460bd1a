//! A BM25 inverted index over a local document corpus, its builder and its file format.
//!
//! # Corpus format (input of the builder)
//! JSON Lines, one document per line: `{"id": "...", "title": "...", "text": "...", "url": "..."}`
//! (`title` and `url` optional). Blank lines are skipped.
//!
//! # Index format (`Bm25Index::save` / `load`)
//! One JSON object:
//! ```json
//! {"format": "uniagent-bm25", "version": 1, "k1": 1.2, "b": 0.75,
//!  "documents": [{"id": "d0", "title": "", "text": "the cat sat", "url": null}],
//!  "doc_lengths": [3],
//!  "postings": {"cat": [[0, 1]], "sat": [[0, 1]], "the": [[0, 1]]}}
//! ```
//! `doc_lengths[i]` is the number of tokens of document `i` (title and text); `postings` maps a
//! token to `[document number, term frequency]` pairs in increasing document order. Tokens are
//! maximal runs of alphanumeric characters, lower-cased (Unicode-aware, no stemming).
//!
//! # Scoring
//! Okapi BM25 with Lucene's idf: `idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))`,
//! `score(d) = Σ_t idf(t) · tf·(k1+1) / (tf + k1·(1 - b + b·|d|/avgdl))` over the distinct query
//! tokens; ties keep corpus order.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use serde::{Deserialize, Serialize};
use uniagent_core::{Error, Result};

/// One document of the corpus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Document {
    /// Unique id.
    pub id: String,
    /// Title (indexed with the text).
    #[serde(default)]
    pub title: String,
    /// Body text.
    pub text: String,
    /// Where the document comes from.
    #[serde(default)]
    pub url: Option<String>,
}

/// A search hit.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit<'a> {
    /// The document.
    pub document: &'a Document,
    /// Its BM25 score.
    pub score: f64,
}

/// The index: documents, their lengths and the postings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bm25Index {
    format: String,
    version: u32,
    k1: f64,
    b: f64,
    documents: Vec<Document>,
    doc_lengths: Vec<u32>,
    postings: BTreeMap<String, Vec<(u32, u32)>>,
}

/// Splits text into lower-cased alphanumeric tokens.
///
/// ```
/// assert_eq!(uniagent_tools::search::tokenize("Rust's BM25, über-fast!"), ["rust", "s", "bm25", "über", "fast"]);
/// ```
pub fn tokenize(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Builds a [`Bm25Index`].
///
/// ```
/// use uniagent_tools::search::{Bm25Builder, Document};
/// let doc = |id: &str, text: &str| Document { id: id.into(), title: String::new(), text: text.into(), url: None };
/// let index = Bm25Builder::new().add_document(doc("a", "rust is fast")).add_document(doc("b", "python is slow")).build()?;
/// assert_eq!(index.search("fast language", 1)[0].document.id, "a");
/// # Ok::<(), uniagent_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Bm25Builder {
    k1: f64,
    b: f64,
    documents: Vec<Document>,
}

impl Default for Bm25Builder {
    fn default() -> Self {
        Self::new()
    }
}

impl Bm25Builder {
    /// A builder with `k1 = 1.2`, `b = 0.75`.
    pub fn new() -> Self {
        Self {
            k1: 1.2,
            b: 0.75,
            documents: Vec::new(),
        }
    }

    /// Sets the BM25 parameters.
    pub fn params(mut self, k1: f64, b: f64) -> Self {
        self.k1 = k1;
        self.b = b;
        self
    }

    /// Adds one document.
    pub fn add_document(mut self, document: Document) -> Self {
        self.documents.push(document);
        self
    }

    /// Adds every document of a JSON Lines corpus.
    pub fn add_jsonl(mut self, reader: impl BufRead) -> Result<Self> {
        for (number, line) in reader.lines().enumerate() {
            let line = line.map_err(|source| Error::Io {
                context: format!("reading corpus line {}", number + 1),
                source,
            })?;
            if line.trim().is_empty() {
                continue;
            }
            let document = serde_json::from_str(&line).map_err(|e| Error::InvalidInput {
                message: format!("corpus line {}: {e}", number + 1),
            })?;
            self.documents.push(document);
        }
        Ok(self)
    }

    /// Builds the index.
    pub fn build(self) -> Result<Bm25Index> {
        if !(self.k1.is_finite() && self.k1 >= 0.0 && (0.0..=1.0).contains(&self.b)) {
            return Err(Error::InvalidInput {
                message: format!(
                    "BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={} b={}",
                    self.k1, self.b
                ),
            });
        }
        let mut postings: BTreeMap<String, Vec<(u32, u32)>> = BTreeMap::new();
        let mut doc_lengths = Vec::with_capacity(self.documents.len());
        for (number, document) in self.documents.iter().enumerate() {
            let number = u32::try_from(number).map_err(|_| Error::InvalidInput {
                message: "too many documents".into(),
            })?;
            let tokens = tokenize(&format!("{}\n{}", document.title, document.text));
            doc_lengths.push(u32::try_from(tokens.len()).unwrap_or(u32::MAX));
            let mut counts: BTreeMap<String, u32> = BTreeMap::new();
            for token in tokens {
                *counts.entry(token).or_default() += 1;
            }
            for (token, tf) in counts {
                postings.entry(token).or_default().push((number, tf));
            }
        }
        Ok(Bm25Index {
            format: FORMAT.into(),
            version: VERSION,
            k1: self.k1,
            b: self.b,
            documents: self.documents,
            doc_lengths,
            postings,
        })
    }
}

const FORMAT: &str = "uniagent-bm25";
const VERSION: u32 = 1;

impl Bm25Index {
    /// The documents, in corpus order.
    pub fn documents(&self) -> &[Document] {
        &self.documents
    }

    /// The `top_k` best documents for `query`, best first; documents sharing no token with the
    /// query are never returned.
    pub fn search(&self, query: &str, top_k: usize) -> Vec<Hit<'_>> {
        let n = self.documents.len() as f64;
        let avgdl = (self.doc_lengths.iter().map(|&l| f64::from(l)).sum::<f64>() / n.max(1.0))
            .max(f64::MIN_POSITIVE);
        let mut terms = tokenize(query);
        terms.sort();
        terms.dedup();
        let mut scores: BTreeMap<u32, f64> = BTreeMap::new();
        for term in &terms {
            let Some(list) = self.postings.get(term) else {
                continue;
            };
            let df = list.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(doc, tf) in list {
                let tf = f64::from(tf);
                let dl = f64::from(self.doc_lengths.get(doc as usize).copied().unwrap_or(0));
                let norm = self.k1 * (1.0 - self.b + self.b * dl / avgdl);
                *scores.entry(doc).or_default() += idf * tf * (self.k1 + 1.0) / (tf + norm);
            }
        }
        let mut ranked: Vec<(u32, f64)> = scores.into_iter().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked
            .into_iter()
            .take(top_k)
            .filter_map(|(doc, score)| {
                self.documents
                    .get(doc as usize)
                    .map(|document| Hit { document, score })
            })
            .collect()
    }

    /// Writes the index as JSON (the format in the module docs).
    pub fn save(&self, path: &Path) -> Result<()> {
        let bytes = serde_json::to_vec(self).map_err(|e| Error::Internal {
            message: format!("encoding index: {e}"),
        })?;
        std::fs::write(path, bytes).map_err(|source| Error::Io {
            context: format!("writing {}", path.display()),
            source,
        })
    }

    /// Reads and validates an index written by [`save`](Self::save).
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            context: format!("reading {}", path.display()),
            source,
        })?;
        Self::from_json(&bytes)
    }

    /// Parses and validates an index from JSON bytes.
    pub fn from_json(bytes: &[u8]) -> Result<Self> {
        let invalid = |message: String| Error::InvalidInput {
            message: format!("BM25 index: {message}"),
        };
        let index: Self = serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
        if index.format != FORMAT || index.version != VERSION {
            return Err(invalid(format!(
                "unsupported format {:?} version {}",
                index.format, index.version
            )));
        }
        if index.doc_lengths.len() != index.documents.len() {
            return Err(invalid("doc_lengths and documents differ in length".into()));
        }
        for (term, list) in &index.postings {
            let ordered = list.windows(2).all(|w| w[0].0 < w[1].0);
            let in_range = list
                .iter()
                .all(|&(doc, tf)| (doc as usize) < index.documents.len() && tf > 0);
            if !ordered || !in_range {
                return Err(invalid(format!(
                    "postings of `{term}` are out of order or out of range"
                )));
            }
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Bm25Index {
        let doc = |id: &str, text: &str| Document {
            id: id.into(),
            title: String::new(),
            text: text.into(),
            url: None,
        };
        Bm25Builder::new()
            .add_document(doc("d0", "the cat sat"))
            .add_document(doc("d1", "the dog sat down"))
            .add_document(doc("d2", "cat cat dog"))
            .build()
            .unwrap()
    }

    #[test]
    fn scores_match_hand_computed_bm25() {
        // Values computed independently (Python, Lucene idf, k1=1.2, b=0.75).
        let index = corpus();
        let hits = index.search("Cat", 10);
        let got: Vec<(&str, f64)> = hits
            .iter()
            .map(|h| (h.document.id.as_str(), h.score))
            .collect();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].0, got[1].0), ("d2", "d0"));
        assert!(
            (got[0].1 - 0.664_956_903_112_938).abs() < 1e-12
                && (got[1].1 - 0.490_051_177_412_615_4).abs() < 1e-12
        );
        let hits = index.search("dog sat sat", 2);
        assert_eq!(hits[0].document.id, "d1");
        assert!((hits[0].score - 0.868_914_272_555_141_6).abs() < 1e-12);
        assert_eq!(hits[1].document.id, "d0", "ties keep corpus order");
        assert!(index.search("zebra", 5).is_empty());
    }

    #[test]
    fn save_load_round_trip_and_validation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.json");
        let index = corpus();
        index.save(&path).unwrap();
        assert_eq!(Bm25Index::load(&path).unwrap(), index);
        let mut broken: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        broken["postings"]["cat"] = serde_json::json!([[9, 1]]);
        assert!(Bm25Index::from_json(broken.to_string().as_bytes()).is_err());
        assert!(Bm25Index::from_json(b"{}").is_err());
    }

    #[test]
    fn jsonl_corpus_with_blank_lines() {
        let jsonl = "{\"id\": \"x\", \"title\": \"Paris\", \"text\": \"capital of France\", \"url\": \"u\"}\n\n";
        let index = Bm25Builder::new()
            .add_jsonl(jsonl.as_bytes())
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(
            index.search("paris", 1)[0].document.url.as_deref(),
            Some("u")
        );
        assert!(Bm25Builder::new()
            .add_jsonl("{\"id\": 1}".as_bytes())
            .is_err());
    }
}
