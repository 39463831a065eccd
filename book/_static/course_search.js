/* Search results by section, with snippets, offline (book/_ext/course_search.py writes the data).
 *
 * Sphinx's search ranks whole pages and fetches each page to show a snippet, which browsers refuse
 * from file://. Here every section (and glossary term) of the book is an entry of
 * COURSE_SECTIONS = [[docname, page title, anchor, section title, text], ...]; courseSearch()
 * ranks them for the query and the search page lists the best sections first, each with the
 * sentence around the first hit. Pages that Sphinx found but no section matched keep their place
 * below. Substring matching also finds Chinese terms, which have no spaces to split on.
 */
"use strict";

const COURSE_SNIPPET = 110;   // characters either side of the first hit

function courseEscape(s) {
  return s.replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}

function courseCount(haystack, needle) {
  let n = 0;
  for (let i = haystack.indexOf(needle); i !== -1 && n < 20; i = haystack.indexOf(needle, i + needle.length)) n++;
  return n;
}

function courseSnippet(text, words, phrase) {
  const lower = text.toLowerCase();
  const hits = words.map((w) => lower.indexOf(w)).filter((i) => i >= 0);
  const whole = phrase ? lower.indexOf(phrase) : -1;   // the sentence with the whole phrase, if any
  const at = whole >= 0 ? whole : hits.length ? Math.min(...hits) : 0;
  const start = Math.max(0, at - COURSE_SNIPPET);
  const end = Math.min(text.length, at + COURSE_SNIPPET);
  return (start > 0 ? "…" : "") + text.slice(start, end).trim() + (end < text.length ? "…" : "");
}

/* Sections matching every word of `query`, as Sphinx results
 * [docname, title, anchor, snippet, score, filename], best LAST (Sphinx pops from the end).
 * Score: the whole phrase in the section title counts most, then each word in the title, then
 * how often the phrase and the words occur in the text (capped, so long sections do not win). */
function courseSearch(query, sections) {
  const phrase = query.toLowerCase().trim().replace(/\s+/g, " ");
  const words = phrase.split(" ").filter((w) => w.length > 0);
  if (!words.length) return [];
  const out = [];
  for (const [doc, page, anchor, title, text] of sections) {
    const t = title.toLowerCase();
    const body = text.toLowerCase();
    if (!words.every((w) => t.includes(w) || body.includes(w))) continue;
    let score = 0;
    if (t.includes(phrase)) score += 100;
    score += 20 * words.filter((w) => t.includes(w)).length;
    if (words.length > 1) score += 8 * Math.min(courseCount(body, phrase), 10);
    for (const w of words) score += Math.min(courseCount(body, w), 10);
    const shown = title === page ? page : `${page} > ${title}`;
    out.push([doc, courseEscape(shown), "#" + anchor, courseEscape(courseSnippet(text, words, phrase)), score, doc]);
  }
  return out.sort((a, b) => a[4] - b[4] || (a[1] < b[1] ? 1 : -1));
}

/* Sphinx's results merged with the section results: a page with a matching section is listed
 * through its sections; pages only Sphinx found (stemmed matches) come after them. */
function courseMerge(sphinxResults, sectionResults) {
  const docsWithSections = new Set(sectionResults.map((r) => r[0]));
  const rest = sphinxResults.filter((r) => !docsWithSections.has(r[0]) || r[2]);
  const seen = new Set(sectionResults.map((r) => r[0] + r[2]));
  const extra = rest.filter((r) => !seen.has(r[0] + r[2])).map((r) => [...r.slice(0, 4), Math.min(r[4], 0), r[5]]);
  return [...extra, ...sectionResults];
}

if (typeof module !== "undefined") {
  module.exports = {courseSearch, courseMerge, courseSnippet};
} else if (typeof Search !== "undefined" && typeof COURSE_SECTIONS !== "undefined") {
  const sphinxSearch = Search._performSearch;
  Search._performSearch = (query, ...rest) =>
    courseMerge(sphinxSearch(query, ...rest), courseSearch(query, COURSE_SECTIONS));
}
