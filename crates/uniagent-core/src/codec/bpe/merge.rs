//! Byte-level BPE merges on raw bytes, with a bounded word cache.
//!
//! Words are never mapped to the GPT-2 byte alphabet: each byte starts as the id of its
//! byte token and merges work on ids. The merge order is `tokenizers`': repeatedly the pair
//! of lowest rank, the leftmost among equal ranks.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

/// A small multiplicative hasher: keys are short byte strings and id pairs, and the maps
/// are private, so `SipHash`'s flooding resistance buys nothing here.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
/// Word bytes → token ids.
type WordCache = FxMap<Box<[u8]>, Box<[u32]>>;

/// Words longer than this merge with a heap instead of repeated scans.
const SCAN_MAX: usize = 48;
/// The word cache is cleared when it holds this many words.
const CACHE_MAX: usize = 8192;

/// The BPE model: byte ids, merge ranks, and the byte length of every token.
pub(crate) struct Merges {
    /// The id of each single-byte token.
    pub(crate) byte_ids: [u32; 256],
    /// `(left, right)` → `(rank, merged id)`.
    pub(crate) ranks: FxMap<u64, (u32, u32)>,
    /// Byte length of each token id (0 for ids that are not model tokens).
    pub(crate) token_len: Vec<u32>,
    cache: Mutex<WordCache>,
}

#[inline]
fn key(a: u32, b: u32) -> u64 {
    (u64::from(a) << 32) | u64::from(b)
}

impl Merges {
    pub(crate) fn new(
        byte_ids: [u32; 256],
        ranks: FxMap<u64, (u32, u32)>,
        token_len: Vec<u32>,
    ) -> Self {
        Self {
            byte_ids,
            ranks,
            token_len,
            cache: Mutex::new(FxMap::default()),
        }
    }

    pub(crate) fn cached_words(&self) -> usize {
        self.cache.lock().map_or(0, |c| c.len())
    }

    #[inline]
    fn rank(&self, a: u32, b: u32) -> Option<(u32, u32)> {
        self.ranks.get(&key(a, b)).copied()
    }

    /// Appends the ids of `word` to `out`.
    pub(crate) fn word(&self, word: &[u8], out: &mut Vec<u32>) {
        if let [b] = word {
            out.push(self.byte_ids[usize::from(*b)]);
            return;
        }
        // An uncontended lock costs little; a contended one is skipped rather than waited for.
        if let Ok(cache) = self.cache.try_lock() {
            if let Some(ids) = cache.get(word) {
                out.extend_from_slice(ids);
                return;
            }
        }
        let start = out.len();
        if word.len() <= SCAN_MAX {
            self.merge_scan(word, out);
        } else {
            self.merge_heap(word, out);
        }
        if let Ok(mut cache) = self.cache.try_lock() {
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
            cache.insert(word.into(), out[start..].into());
        }
    }

    /// Short words: find the best pair by scanning the pair ranks each round.
    fn merge_scan(&self, word: &[u8], out: &mut Vec<u32>) {
        let mut syms: Vec<u32> = word
            .iter()
            .map(|&b| self.byte_ids[usize::from(b)])
            .collect();
        let mut pairs: Vec<Option<(u32, u32)>> =
            syms.windows(2).map(|w| self.rank(w[0], w[1])).collect();
        loop {
            let mut best: Option<(usize, u32, u32)> = None;
            for (i, p) in pairs.iter().enumerate() {
                if let Some((rank, id)) = *p {
                    if best.is_none_or(|(_, r, _)| rank < r) {
                        best = Some((i, rank, id));
                    }
                }
            }
            let Some((i, _, id)) = best else { break };
            syms[i] = id;
            syms.remove(i + 1);
            pairs.remove(i);
            if i > 0 {
                pairs[i - 1] = self.rank(syms[i - 1], id);
            }
            if i < pairs.len() {
                pairs[i] = self.rank(id, syms[i + 1]);
            }
        }
        out.extend_from_slice(&syms);
    }

    /// Long words: symbols in a linked list, candidate merges in a min-heap of
    /// `(rank, position)`; stale candidates are skipped when popped.
    fn merge_heap(&self, word: &[u8], out: &mut Vec<u32>) {
        let n = word.len();
        let mut id: Vec<u32> = word
            .iter()
            .map(|&b| self.byte_ids[usize::from(b)])
            .collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut next: Vec<usize> = (1..=n).collect();
        let mut alive = vec![true; n];
        let mut heap = BinaryHeap::new();
        for i in 0..n - 1 {
            if let Some((rank, new)) = self.rank(id[i], id[i + 1]) {
                heap.push(Reverse((rank, i, id[i], id[i + 1], new)));
            }
        }
        while let Some(Reverse((_, i, left, right, new))) = heap.pop() {
            let j = next[i];
            // Skip candidates whose symbols changed since they were pushed.
            if !alive[i] || j >= n || id[i] != left || id[j] != right {
                continue;
            }
            id[i] = new;
            alive[j] = false;
            next[i] = next[j];
            if next[i] < n {
                prev[next[i]] = i;
            }
            let p = prev[i];
            if p < n {
                if let Some((r, m)) = self.rank(id[p], new) {
                    heap.push(Reverse((r, p, id[p], new, m)));
                }
            }
            let k = next[i];
            if k < n {
                if let Some((r, m)) = self.rank(new, id[k]) {
                    heap.push(Reverse((r, i, new, id[k], m)));
                }
            }
        }
        let mut i = 0;
        while i < n {
            out.push(id[i]);
            i = next[i];
        }
    }
}
