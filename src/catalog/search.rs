//! BM25 search over skills and their sections.
//!
//! Each skill contributes one document for its name, description and `when_to_use`, and one
//! per section (heading path + own text). A skill's score is its own document's score plus
//! its best section's; an exact skill name or trigger phrase in the query puts the skill
//! ahead of every keyword-only match.

use std::collections::HashMap;

use super::Skill;

const K1: f64 = 1.2;
const B: f64 = 0.75;
/// Added when the query names a skill exactly.
const EXACT_NAME_BOOST: f64 = 1000.0;
/// Added when the query is, or contains, one of a skill's trigger phrases.
const TRIGGER_BOOST: f64 = 100.0;

const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "do", "for", "from", "how", "i", "in", "is",
    "it", "of", "on", "or", "the", "this", "to", "what", "when", "which", "with", "use", "my",
];

/// Lowercase words of letters and digits, minus stopwords, with a plural `s` dropped.
pub fn tokenize(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .filter(|word| !STOPWORDS.contains(&word.as_str()))
        .map(|word| {
            if word.len() > 3 && word.ends_with('s') && !word.ends_with("ss") {
                word[..word.len() - 1].to_owned()
            } else {
                word
            }
        })
        .collect()
}

#[derive(Debug, Clone, Default)]
struct Document {
    skill: usize,
    /// `None` for the skill-level document.
    section: Option<usize>,
    term_counts: HashMap<String, f64>,
    length: f64,
}

impl Document {
    fn add(&mut self, text: &str, weight: f64) {
        for token in tokenize(text) {
            *self.term_counts.entry(token).or_insert(0.0) += weight;
            self.length += weight;
        }
    }
}

/// The index, built once per catalog snapshot.
#[derive(Debug, Clone, Default)]
pub struct SearchIndex {
    skill_names: Vec<String>,
    documents: Vec<Document>,
    document_frequency: HashMap<String, usize>,
    average_length: f64,
}

/// A ranked skill with its best section.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    pub skill: String,
    /// Index into the skill's `sections.sections`; `None` when the name or description matched
    /// better than any section.
    pub section: Option<usize>,
    pub score: f64,
}

impl SearchIndex {
    /// Index skills given in catalog order.
    pub fn build<'a>(skills: impl IntoIterator<Item = &'a Skill>) -> Self {
        let mut index = Self::default();
        for (skill_index, skill) in skills.into_iter().enumerate() {
            index.skill_names.push(skill.name.clone());
            let mut document = Document {
                skill: skill_index,
                ..Document::default()
            };
            document.add(&skill.name.replace('-', " "), 3.0);
            document.add(&skill.description, 2.0);
            if let Some(when) = &skill.when_to_use {
                document.add(when, 2.0);
            }
            index.documents.push(document);
            for (section_index, section) in skill.sections.sections.iter().enumerate() {
                let mut document = Document {
                    skill: skill_index,
                    section: Some(section_index),
                    ..Document::default()
                };
                document.add(&section.path.join(" "), 2.0);
                document.add(&section.text, 1.0);
                index.documents.push(document);
            }
        }
        for document in &index.documents {
            for term in document.term_counts.keys() {
                *index.document_frequency.entry(term.clone()).or_insert(0) += 1;
            }
        }
        let total: f64 = index.documents.iter().map(|d| d.length).sum();
        index.average_length = if index.documents.is_empty() {
            1.0
        } else {
            (total / index.documents.len() as f64).max(1.0)
        };
        index
    }

    fn bm25(&self, document: &Document, terms: &[String]) -> f64 {
        let count = self.documents.len() as f64;
        terms
            .iter()
            .map(|term| {
                let Some(&tf) = document.term_counts.get(term) else {
                    return 0.0;
                };
                let df = self.document_frequency.get(term).copied().unwrap_or(0) as f64;
                let idf = ((count - df + 0.5) / (df + 0.5) + 1.0).ln();
                let norm = K1 * (1.0 - B + B * document.length / self.average_length);
                idf * tf * (K1 + 1.0) / (tf + norm)
            })
            .sum()
    }

    /// Rank skills for `query`. `skills` must be the same skills, in the same order, as were
    /// given to [`SearchIndex::build`].
    pub fn search(&self, skills: &[&Skill], query: &str, limit: usize) -> Vec<SearchHit> {
        let mut terms = tokenize(query);
        terms.sort();
        terms.dedup();
        let normalized_query = normalize_phrase(query);
        let mut best: Vec<(f64, Option<(usize, f64)>)> = vec![(0.0, None); self.skill_names.len()];
        for document in &self.documents {
            let score = self.bm25(document, &terms);
            if score <= 0.0 {
                continue;
            }
            let entry = &mut best[document.skill];
            match document.section {
                None => entry.0 += score,
                Some(section) => {
                    if entry.1.is_none_or(|(_, previous)| score > previous) {
                        entry.1 = Some((section, score));
                    }
                }
            }
        }
        let mut hits: Vec<SearchHit> = best
            .into_iter()
            .enumerate()
            .filter_map(|(skill_index, (skill_score, section))| {
                let skill = skills.get(skill_index)?;
                let mut score = skill_score + section.map_or(0.0, |(_, s)| s);
                if !normalized_query.is_empty() {
                    let name = normalize_phrase(&skill.name);
                    if normalized_query == name || normalized_query == skill.name.to_lowercase() {
                        score += EXACT_NAME_BOOST;
                    } else if skill.triggers.iter().any(|trigger| {
                        let trigger = normalize_phrase(trigger);
                        !trigger.is_empty()
                            && (normalized_query == trigger
                                || contains_phrase(&normalized_query, &trigger))
                    }) {
                        score += TRIGGER_BOOST;
                    }
                }
                (score > 0.0).then(|| SearchHit {
                    skill: skill.name.clone(),
                    section: section.map(|(index, _)| index),
                    score,
                })
            })
            .collect();
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.skill.cmp(&b.skill))
        });
        hits.truncate(limit);
        hits
    }
}

/// Lowercase words joined by single spaces (hyphens count as spaces).
pub fn normalize_phrase(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

fn contains_phrase(haystack: &str, phrase: &str) -> bool {
    format!(" {haystack} ").contains(&format!(" {phrase} "))
}

/// Up to ~240 characters of `text` around the first query word, whitespace collapsed.
pub fn snippet(text: &str, query: &str) -> String {
    const BEFORE: usize = 80;
    const AFTER: usize = 160;
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let lower = flat.to_ascii_lowercase();
    let position = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| word.len() > 1)
        .filter_map(|word| lower.find(&word.to_ascii_lowercase()))
        .min()
        .unwrap_or(0);
    let mut start = position.saturating_sub(BEFORE);
    while !flat.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (position + AFTER).min(flat.len());
    while !flat.is_char_boundary(end) {
        end += 1;
    }
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.push_str(flat[start..end].trim());
    if end < flat.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_drops_stopwords_and_plurals() {
        assert_eq!(
            tokenize("How to size the CP for 128K sequences"),
            ["size", "cp", "128k", "sequence"]
        );
    }

    #[test]
    fn snippet_centres_on_the_first_match_and_respects_utf8() {
        let text = format!(
            "{} context parallel sizing ≥ rules {}",
            "é".repeat(200),
            "ü".repeat(200)
        );
        let snip = snippet(&text, "sizing");
        assert!(snip.contains("sizing"));
        assert!(snip.starts_with('…') && snip.ends_with('…'));
    }
}
