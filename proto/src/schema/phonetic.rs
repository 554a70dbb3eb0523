//! Approximate matching of directory and IA5 strings (`~=`, RFC 4511 §4.5.1.7.6), as slapd
//! 2.5 does it for caseIgnoreMatch, caseExactMatch and their IA5 forms: the value is split
//! into words at spaces, each word reduced to its Metaphone key (Lawrence Philips, 1990,
//! in the University of Michigan variant slapd carries: at most four letters), and every
//! word of the assertion must sound like a word of the value, in the same order
//! (`Barbra Jensen` ~ `Barbara Jensen`, `night` ~ `Knight`; `Jensen Barbara` does not
//! match). The RFC leaves the meaning of `~=` to the server; clients written against slapd
//! expect its answers, which tests/conformance/edges.rs compares.
//!
//! A word ends at the first character that is not an ASCII letter (a digit, punctuation,
//! any non-ASCII character): `Smith,` is `Smith`, `O'Brien` is `O`. slapd first strips
//! accents by Unicode decomposition; without those tables here, an accented letter ends its
//! word, so `José` sounds like `Jos`.

/// Longest key: slapd's MAXPHONEMELEN.
const KEY_LETTERS_MAX: usize = 4;
/// Letters of a word that are looked at: slapd copies at most 31 into its buffer.
const WORD_LETTERS_MAX: usize = 31;

/// Whether every space-separated word of `assertion` sounds like a word of `value`, each
/// after the previous one's. An assertion without words matches nothing.
pub fn approx_words_match(value: &str, assertion: &str) -> bool {
    // The value keeps its empty words (two spaces in a row), as slapd's split does; the
    // assertion skips them.
    let keys: Vec<String> = value.split(' ').map(metaphone).collect();
    let mut next = 0;
    let mut seen = false;
    for word in assertion.split(' ').filter(|w| !w.is_empty()) {
        let key = metaphone(word);
        match keys.iter().skip(next).position(|k| *k == key) {
            Some(at) => {
                next += at + 1;
                seen = true;
            }
            None => return false,
        }
    }
    seen
}

/// The Metaphone key of the first word of `word` (its letters up to the first character
/// that is not an ASCII letter), in capitals, at most four letters; `0` stands for `TH`.
pub fn metaphone(word: &str) -> String {
    let letters: Vec<u8> = word
        .bytes()
        .take_while(u8::is_ascii_alphabetic)
        .take(WORD_LETTERS_MAX)
        .map(|b| b.to_ascii_uppercase())
        .collect();
    let mut key = String::new();
    if letters.is_empty() {
        return key;
    }

    // Look-behind and look-ahead read 0 outside the word, as the C buffer's padding does;
    // a dropped first letter reads 0 too.
    let mut w = letters;
    let at =
        |w: &[u8], i: isize| -> u8 { usize::try_from(i).ok().and_then(|i| w.get(i)).copied().unwrap_or(0) };
    let mut start = 0;
    // The first letters: PN, KN, GN, AE drop their first; WR drops W; WH becomes W; X is S.
    match (at(&w, 0), at(&w, 1)) {
        (b'P' | b'K' | b'G', b'N') | (b'A', b'E') | (b'W', b'R') => start = 1,
        (b'W', b'H') => {
            if let Some(second) = w.get_mut(1) {
                *second = b'W';
            }
            start = 1;
        }
        (b'X', _) => {
            if let Some(first) = w.first_mut() {
                *first = b'S';
            }
        }
        _ => {}
    }
    if start == 1 {
        if let Some(first) = w.first_mut() {
            *first = 0;
        }
    }
    let end = w.len() as isize;
    let vowel = |c: u8| matches!(c, b'A' | b'E' | b'I' | b'O' | b'U');
    let front_vowel = |c: u8| matches!(c, b'E' | b'I' | b'Y');
    let varson = |c: u8| matches!(c, b'C' | b'G' | b'P' | b'S' | b'T');
    let no_gh_f = |c: u8| matches!(c, b'B' | b'D' | b'H');
    let mut then_s = false;
    let mut p: isize = start;
    while p <= end && key.len() < KEY_LETTERS_MAX {
        let (c, prev, next, next2) = (at(&w, p), at(&w, p - 1), at(&w, p + 1), at(&w, p + 2));
        let first = p == start;
        p += 1;
        if then_s {
            // The S of X's KS takes the place of the letter after the X.
            then_s = false;
            key.push('S');
            continue;
        }
        if c == 0 || (prev == c && c != b'C') {
            continue;
        }
        if matches!(c, b'F' | b'J' | b'L' | b'M' | b'N' | b'R') || (first && vowel(c)) {
            key.push(char::from(c));
            continue;
        }
        let here = p - 1;
        let out: Option<u8> = match c {
            // Only as the last letter, and not after M: slapd's variant (Philips keeps B
            // everywhere but in a final -MB). `Babs` is `S`, `Bab` is `B`, as in slapd.
            b'B' => (here == end - 1 && prev != b'M').then_some(b'B'),
            b'C' if prev == b'S' && front_vowel(next) => None, // -SCE-, -SCI-, -SCY-
            b'C' if next == b'I' && next2 == b'A' => Some(b'X'),
            b'C' if front_vowel(next) => Some(b'S'),
            b'C' if next == b'H' => Some(if (first && !vowel(next2)) || prev == b'S' { b'K' } else { b'X' }),
            b'C' => Some(b'K'),
            b'D' => Some(if next == b'G' && front_vowel(next2) { b'J' } else { b'T' }),
            b'G' => {
                // Silent in -GN (not -GNED) at the end, and in -DGE-, -DGI-, -DGY-.
                let gn = next == b'N' && !(here + 1 < end && (next2 != b'E' || at(&w, here + 3) != b'D'));
                let dge = prev == b'D' && front_vowel(next);
                if (next != b'J' || vowel(next2)) && !gn && !dge {
                    Some(if front_vowel(next) && next2 != b'G' { b'G' } else { b'K' })
                } else if next == b'H' && !no_gh_f(at(&w, here - 3)) && at(&w, here - 4) != b'H' {
                    Some(b'F')
                } else {
                    None
                }
            }
            b'H' => (!varson(prev) && (!vowel(prev) || vowel(next))).then_some(b'H'),
            b'K' => (prev != b'C').then_some(b'K'),
            b'P' => Some(if next == b'H' { b'F' } else { b'P' }),
            b'Q' => Some(b'K'),
            b'S' => {
                Some(if next == b'H' || (next == b'I' && matches!(next2, b'O' | b'A')) { b'X' } else { b'S' })
            }
            b'T' if next == b'I' && matches!(next2, b'O' | b'A') => Some(b'X'),
            b'T' if next == b'H' => Some(b'0'),
            b'T' => (next != b'C' || next2 != b'H').then_some(b'T'),
            b'V' => Some(b'F'),
            b'W' | b'Y' => vowel(next).then_some(c),
            b'X' if first => Some(b'S'),
            b'X' => {
                then_s = true;
                Some(b'K')
            }
            b'Z' => Some(b'S'),
            _ => None, // a vowel after the first letter
        };
        if let Some(letter) = out {
            key.push(char::from(letter));
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_common_names() {
        // slapd's variant keeps G before H (its test is for J where Philips' is for H).
        assert_eq!(metaphone("Knight"), "NKT");
        assert_eq!(metaphone("night"), "NKT");
        assert_eq!(metaphone("Jensen"), metaphone("Jenson"));
        assert_eq!(metaphone("Barbara"), metaphone("Barbra"));
        assert_eq!(metaphone("Smith,"), "SM0");
        assert_eq!(metaphone("Thomas"), "0MS");
        assert_eq!(metaphone("Xavier"), "SFR");
        assert_eq!(metaphone("Phone"), "FN");
        assert_eq!(metaphone("Wright"), metaphone("Right"));
        assert_eq!(metaphone("123"), "");
        assert_eq!(metaphone("Christopher").len(), 4);
    }

    #[test]
    fn words_in_order() {
        assert!(approx_words_match("Barbara Jensen", "barbra jensen"));
        assert!(approx_words_match("Barbara Jensen", "Jenson"));
        assert!(!approx_words_match("Barbara Jensen", "jensen barbara"));
        assert!(approx_words_match("Knight of the realm", "night"));
        assert!(!approx_words_match("Smith, John", "John Smith"));
        assert!(approx_words_match("Smith, John", "Smith, John"));
        assert!(!approx_words_match("Barbara Jensen", ""));
        assert!(!approx_words_match("Barbara Jensen", "Barbara Jones"));
    }
}
