// Opens every page of a built book in headless Chromium and reports what a reader would meet:
// console errors, failed requests, broken images; then searches for a technique by name; then
// looks at the --layout pages at 1280 px and at a phone's 390 px for clipped headline figures:
// an element whose scrollWidth exceeds its clientWidth (or that runs past the window's right
// edge) while it holds an "Effect of" headline or a measured figure ("1.84x faster").
// usage: NODE_PATH=.../node_modules node book_browser_check.js BASE_URL QUERY
//          [--layout a.html,b.html] [--shots DIR] PAGE...
// prints one JSON object: {pages: [{page, errors}], search: {query, hits},
//                          layout: [{page, width, headlines, figures, clipped: [...]}]}
'use strict';
const { chromium } = require('playwright-core');

const args = process.argv.slice(2);
const option = (name) => {
  const i = args.indexOf(name);
  if (i < 0) return '';
  const [value] = args.splice(i, 2).slice(1);
  return value || '';
};
const layoutPages = option('--layout').split(',').filter(Boolean);
const shots = option('--shots');
const [base, query, ...pages] = args;
const WIDTHS = [[1280, 900], [390, 844]];

// Runs in the page: the innermost elements of the article that hold a headline or a figure,
// and those of them a reader cannot see whole.
function clippedFigures() {
  const FIGURE = /\d+(\.\d+)?x (faster|slower|less|more|fewer|higher|lower)/;
  const article = document.querySelector('.bd-article') || document.body;
  const holders = [...article.querySelectorAll('*')].filter((el) => {
    const text = el.textContent || '';
    if (!(text.includes('Effect of') || FIGURE.test(text))) return false;
    return ![...el.children].some((c) => (c.textContent || '').includes('Effect of')
      || FIGURE.test(c.textContent || ''));
  });
  const clipped = [];
  for (const el of holders) {
    // every element from the holder up to the article: any of them may be the one that clips
    for (let box = el; box && box !== article.parentElement; box = box.parentElement) {
      const right = box.getBoundingClientRect().right;
      if (box.scrollWidth > box.clientWidth + 1 || right > window.innerWidth + 1) {
        clipped.push(`${box.tagName.toLowerCase()}.${box.className}: ${el.textContent.trim().slice(0, 80)}`);
        break;
      }
    }
  }
  const headlines = holders.filter((el) => el.textContent.includes('Effect of')).length;
  return { headlines, figures: holders.length, clipped };
}

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu'],
  });
  const page = await browser.newPage();
  // Only the site itself is judged: an offline machine cannot fetch external badges or fonts.
  const ours = (url) => url.startsWith(base);
  let errors = [];
  page.on('console', (m) => {
    const where = (m.location() || {}).url || '';
    if (m.type() === 'error' && (where === '' || ours(where))) errors.push(`console: ${m.text()} (${where})`);
  });
  page.on('pageerror', (e) => errors.push(`exception: ${e.message}`));
  page.on('requestfailed', (r) => {
    const why = (r.failure() || {}).errorText || '';
    // ERR_ABORTED: the next page was opened while this request was in flight (not a defect)
    if (ours(r.url()) && !why.includes('ERR_ABORTED')) errors.push(`request failed: ${r.url()} ${why}`);
  });
  page.on('response', (r) => { if (r.status() >= 400 && ours(r.url())) errors.push(`HTTP ${r.status()}: ${r.url()}`); });
  const result = { pages: [], search: null, layout: [] };
  for (const rel of pages) {
    errors = [];
    await page.goto(`${base}/${rel}`, { waitUntil: 'load', timeout: 60000 });
    const broken = await page.$$eval('img', (imgs) => imgs
      .filter((i) => i.src.startsWith(location.origin) && (!i.complete || i.naturalWidth === 0))
      .map((i) => i.getAttribute('src')));
    for (const src of broken) errors.push(`image not shown: ${src}`);
    result.pages.push({ page: rel, errors });
  }
  errors = [];
  await page.goto(`${base}/search.html?q=${encodeURIComponent(query)}`, { waitUntil: 'load' });
  let hits = [];
  for (let i = 0; i < 60 && hits.length === 0; i++) {
    await page.waitForTimeout(250);
    hits = await page.$$eval('#search-results li a, ul.search li a', (as) => as.map((a) => a.getAttribute('href')));
  }
  result.search = { query, hits, errors };
  for (const [width, height] of WIDTHS) {
    await page.setViewportSize({ width, height });
    for (const rel of layoutPages) {
      await page.goto(`${base}/${rel}`, { waitUntil: 'load', timeout: 60000 });
      const seen = await page.evaluate(clippedFigures);
      result.layout.push({ page: rel, width, ...seen });
      if (shots) {
        await page.evaluate(() => {
          const el = document.querySelector('.course-effect, .cheat-card');
          if (el) { el.scrollIntoView(); window.scrollBy(0, -200); }
        });
        await page.screenshot({ path: `${shots}/${width}-${rel.replace(/[/.]/g, '_')}.png` });
      }
    }
  }
  await browser.close();
  process.stdout.write(JSON.stringify(result));
})().catch((e) => { console.error(e); process.exit(2); });
