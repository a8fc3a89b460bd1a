//! The codec's built-in Qwen2 BPE encoder equals `tokenizers` (ids and byte offsets) on
//! random text over a rich alphabet and on the fixtures' golden renders, for both fixtures.
#![cfg(feature = "codec")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns unwrap too

mod codec_common;

use std::sync::OnceLock;

use codec_common::tokenizer_dir as dir;
use proptest::prelude::*;
use serde_json::Value;
use uniagent_core::codec::Codec;

fn codec(family: &'static str) -> &'static Codec {
    static QWEN25: OnceLock<Codec> = OnceLock::new();
    static QWEN3: OnceLock<Codec> = OnceLock::new();
    let cell = if family == "qwen3" { &QWEN3 } else { &QWEN25 };
    cell.get_or_init(|| {
        let codec = Codec::from_dir(dir(family)).unwrap();
        assert!(
            codec.native_encoder(),
            "{family} must get the native encoder"
        );
        codec
    })
}

fn assert_matches(codec: &Codec, text: &str) {
    let want = codec.tokenizer().encode(text, false).unwrap();
    let (ids, offsets) = codec.encode_with_offsets(text).unwrap();
    assert_eq!(ids, want.get_ids(), "ids of {text:?}");
    assert_eq!(offsets, want.get_offsets(), "offsets of {text:?}");
    assert_eq!(codec.encode(text).unwrap(), ids, "encode of {text:?}");
}

/// Pieces that exercise every branch of the pre-tokenizer regex, the added tokens, NFC and
/// the Unicode classes where `char` methods and Oniguruma could disagree.
const PIECES: &[&str] = &[
    "a",
    "Z",
    "hello",
    " world",
    "The",
    "q",
    "x1",
    "0",
    "7",
    "42",
    "12345",
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\r\n",
    "\r",
    "\n\n",
    " \n",
    "\u{b}",
    "\u{c}",
    "'s",
    "'S",
    "'t",
    "'re",
    "'VE",
    "'m",
    "'ll",
    "'LL",
    "'d",
    "'D",
    "'x",
    "'",
    "'ſ",
    "ſ",
    ".",
    "...",
    "!",
    "?!",
    ",",
    ";",
    "{\"",
    "\"}",
    "()",
    "[]",
    "-",
    "_",
    "=",
    "#",
    "/",
    "\\",
    "`",
    "```",
    "*",
    "é",
    "e\u{301}",
    "E\u{301}",
    "A\u{30a}",
    "\u{212b}",
    "ñ",
    "n\u{303}",
    "ü",
    "u\u{308}",
    "\u{301}",
    "\u{327}",
    "\u{323}\u{307}",
    "s\u{323}\u{307}",
    "\u{1e9b}\u{323}",
    "\u{958}",
    "\u{1100}\u{1161}",
    "\u{1100}\u{1161}\u{11a8}",
    "한",
    "中文",
    "日本語",
    "のは",
    "кот",
    "Ωμέγα",
    "العربية",
    "עברית",
    "हिन्दी",
    "ไทย",
    "😀",
    "👍🏽",
    "👨‍👩‍👧",
    "🇫🇷",
    "\u{fe0f}",
    "٣",
    "٤٥",
    "१२",
    "Ⅻ",
    "½",
    "²",
    "\u{85}",
    "\u{a0}",
    "\u{1680}",
    "\u{2000}",
    "\u{2009}",
    "\u{200a}",
    "\u{2028}",
    "\u{2029}",
    "\u{202f}",
    "\u{205f}",
    "\u{3000}",
    "\u{180e}",
    "\u{200b}",
    "\u{200d}",
    "\u{feff}",
    "\u{1c}",
    "\u{1f}",
    "\u{7f}",
    "\u{0}",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<tool_response>",
    "<|fim_prefix|>",
    "<|im_end",
    "<tool",
    "<",
    ">",
    "|",
    "<|",
    "ß",
    "ẞ",
    "ﬅ",
    "İ",
    "ǅ",
    "ʰ",
    "ª",
    "\u{10ffff}",
    "\u{e000}",
    "\u{1d400}",
    "\u{1f600}",
    "©",
    "€",
    "$",
    "ﬁ",
];

fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(PIECES).prop_map(str::to_owned),
        1 => any::<char>().prop_map(String::from),
        1 => "[ -~]{1,6}",
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(piece(), 0..16).prop_map(|pieces| pieces.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn native_encoder_equals_tokenizers(text in text()) {
        assert_matches(codec("qwen3"), &text);
        assert_matches(codec("qwen2.5"), &text);
    }
}

#[test]
fn tricky_branches() {
    for family in ["qwen3", "qwen2.5"] {
        let codec = codec(family);
        for text in [
            "  \n  x",
            "trailing spaces   ",
            "   leading",
            "IT'S WE'LL THEY'RE I'M 'ſ",
            "12345",
            "ab12cd٣٤",
            "end...!!\n\n\nnext",
            "x ---\r\n\r\ny",
            " \t \u{3000}x",
            "\u{85}x\u{2028}y\u{feff}z",
            &"é".repeat(80),
            &"z".repeat(500),
            &" ".repeat(300),
        ] {
            assert_matches(codec, text);
        }
    }
}

#[test]
fn golden_corpus() {
    for family in ["qwen3", "qwen2.5"] {
        let codec = codec(family);
        let mut texts = Vec::new();
        for (file, key) in [
            ("templates_golden.json", "rendered"),
            ("encode_golden.json", "text"),
        ] {
            let raw = std::fs::read_to_string(dir(family).join(file)).unwrap();
            let golden: Value = serde_json::from_str(&raw).unwrap();
            for case in golden["cases"].as_array().unwrap() {
                if let Some(t) = case[key].as_str() {
                    texts.push(t.to_owned());
                }
            }
        }
        assert!(texts.len() > 20, "{family}: {} texts", texts.len());
        for text in &texts {
            assert_matches(codec, text);
        }
    }
}
