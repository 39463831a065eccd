/* Search results by section, with snippets, offline (book/_ext/course_search.py writes the data).
 *
 * Sphinx's search ranks whole pages and fetches each page to show a snippet, which browsers refuse
 * from file://. Here every section (and glossary term) of the book is an entry of
 * COURSE_SECTIONS = [[docname, page title, anchor, section title, text], ...]; courseSearch()
 * ranks them for the query and the search page lists the best sections first, each with the
 * sentence around the first hit. Pages that Sphinx found but no section matched keep their place
 * below. Substring matching also finds Chinese terms, which have no spaces to split on.
 *
 * Two ways a query word that the book does not contain still finds something:
 * - a Chinese term also finds the chapters' sections about its English term: COURSE_ZH maps each
 *   Chinese term of the glossary to its English one ("气泡" -> "bubble");
 * - a typo: a word of 5 or more letters that no section contains matches the book's words within
 *   an edit distance of 1 (5 to 7 letters) or 2 (8 or more): "stragler" finds "straggler".
 * Either kind of match scores half of what the word itself would, and a section that holds more of
 * the query's own words ranks above one that holds fewer.
 *
 * Each edition searches itself first (issue #35): the search box of a Chinese page sends
 * edition=zh, an English page's edition=en (course_editions.js adds the field), and the sections of
 * that edition (book/zh/ or not) rank above the other's, each edition in its own order. The other
 * edition's sections still follow: a chapter not yet translated is found from a Chinese page.
 * Without the field (a search typed into the address bar) the book is ranked as one.
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

const COURSE_CJK = /[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]/;

/* Edit distance of a and b (insertions, deletions, substitutions and swaps of two neighbours:
 * "bubbel" is 1 from "bubble"), or max + 1 as soon as it must exceed max. */
function courseEditDistance(a, b, max) {
  if (Math.abs(a.length - b.length) > max) return max + 1;
  let before = null, prev = Array.from({length: b.length + 1}, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    let best = i;
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (before && i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        row[j] = Math.min(row[j], before[j - 2] + 1);
      best = Math.min(best, row[j]);
    }
    if (best > max) return max + 1;
    [before, prev] = [prev, row];
  }
  return prev[b.length];
}

const courseVocabs = new WeakMap();   // sections -> the set of their lower-case words
function courseVocab(sections) {
  if (!courseVocabs.has(sections)) {
    const words = new Set();
    for (const s of sections) for (const w of (s[3] + " " + s[4]).toLowerCase().match(/[a-z][a-z0-9-]*/g) || []) words.add(w);
    courseVocabs.set(sections, words);
  }
  return courseVocabs.get(sections);
}

/* The book's words within the typo distance of `word` (see the top of this file), closest first. */
function courseNear(word, sections) {
  if (word.length < 5 || !/^[a-z][a-z0-9-]*$/.test(word)) return [];
  const max = word.length >= 8 ? 2 : 1, near = [];
  for (const w of courseVocab(sections)) {
    const d = courseEditDistance(word, w, max);
    if (d <= max) near.push([d, w]);
  }
  return near.sort((x, y) => x[0] - y[0] || (x[1] < y[1] ? -1 : 1)).map((x) => x[1]);
}

/* What a query word may match: [the word itself, ...stand-ins]; the stand-ins are the English terms
 * of a Chinese word (COURSE_ZH; a term that holds the word or that the word holds), or else, when
 * no section holds the word, the book's words within typo distance. */
function courseAlternatives(word, sections, zh) {
  if (COURSE_CJK.test(word)) {
    const english = [];
    for (const [term, names] of Object.entries(zh || {}))
      if (term.includes(word) || word.includes(term)) for (const n of names) if (!english.includes(n)) english.push(n);
    return [word, ...english];
  }
  const found = sections.some((s) => s[3].toLowerCase().includes(word) || s[4].toLowerCase().includes(word));
  return found ? [word] : [word, ...courseNear(word, sections)];
}

/* Sections matching every word of `query`, as Sphinx results
 * [docname, title, anchor, snippet, score, filename], best LAST (Sphinx pops from the end).
 * Score: the whole phrase in the section title counts most, then each word in the title, then
 * how often the phrase and the words occur in the text (capped, so long sections do not win). */
function courseEditionOf(docname) { return /^(book|notebooks|solutions)\/zh\//.test(docname) ? "zh" : "en"; }

/* Sphinx's own search messages in Chinese, for a search sent from a Chinese page (edition=zh). */
const COURSE_SEARCH_ZH = {
  "Search Results": "搜索结果",
  "Searching": "正在搜索",
  "Preparing search...": "正在准备搜索……",
  ", in ": "，位于 ",
  "Search finished, found ${resultCount} page(s) matching the search query.":
    "搜索完成，找到 ${resultCount} 个匹配的页面。",
  "Your search did not match any documents. Please make sure that all words are spelled correctly and that you've selected enough categories.":
    "没有找到匹配的页面。请检查拼写，或换一个词再搜。",
};
const COURSE_OWN_EDITION = 1e6;   // above any score a section earns from the query

function courseSearch(query, sections, zh, edition) {
  const phrase = query.toLowerCase().trim().replace(/\s+/g, " ");
  const words = phrase.split(" ").filter((w) => w.length > 0);
  if (!words.length) return [];
  const choices = words.map((w) => courseAlternatives(w, sections, zh));
  const out = [];
  for (const [doc, page, anchor, title, text] of sections) {
    const t = title.toLowerCase();
    const body = text.toLowerCase();
    // per query word: the first of its alternatives this section holds (the word itself first)
    const hit = choices.map((alts) => alts.find((a) => t.includes(a) || body.includes(a)));
    if (hit.some((h) => h === undefined)) continue;
    const weight = hit.map((h, i) => (h === words[i] ? 1 : 0.5));
    let score = 1000 * weight.filter((w) => w === 1).length;   // the words themselves before stand-ins
    if (t.includes(phrase)) score += 100;
    hit.forEach((h, i) => { if (t.includes(h)) score += 20 * weight[i]; });
    if (words.length > 1) score += 8 * Math.min(courseCount(body, phrase), 10);
    hit.forEach((h, i) => { score += weight[i] * Math.min(courseCount(body, h), 10); });
    if (edition && courseEditionOf(doc) === edition) score += COURSE_OWN_EDITION;
    const shown = title === page ? page : `${page} > ${title}`;
    out.push([doc, courseEscape(shown), "#" + anchor, courseEscape(courseSnippet(text, hit, phrase)), score, doc]);
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
  module.exports = {courseSearch, courseMerge, courseSnippet, courseEditDistance, courseNear, courseEditionOf,
                    COURSE_SEARCH_ZH};
} else if (typeof Search !== "undefined" && typeof COURSE_SECTIONS !== "undefined") {
  const sphinxSearch = Search._performSearch;
  const edition = new URLSearchParams(window.location.search).get("edition");
  if (edition === "zh" && typeof Documentation !== "undefined") {
    Object.assign(Documentation.TRANSLATIONS, COURSE_SEARCH_ZH);
    document.documentElement.lang = "zh-CN";
    const heading = document.getElementById("search-documentation");
    if (heading) { heading.textContent = "搜索"; }
  }
  Search._performSearch = (query, ...rest) =>
    courseMerge(sphinxSearch(query, ...rest),
                courseSearch(query, COURSE_SECTIONS, typeof COURSE_ZH !== "undefined" ? COURSE_ZH : {},
                             edition === "zh" || edition === "en" ? edition : null));
}
