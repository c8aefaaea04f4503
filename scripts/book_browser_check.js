// Opens every page of a built book in headless Chromium and reports what a reader would meet:
// console errors, failed requests, broken images; then searches for a technique by name.
// usage: NODE_PATH=.../node_modules node book_browser_check.js BASE_URL QUERY PAGE...
// prints one JSON object: {pages: [{page, errors: [...]}], search: {query, hits}}
'use strict';
const { chromium } = require('playwright-core');

const [base, query, ...pages] = process.argv.slice(2);

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
  const result = { pages: [], search: null };
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
  await browser.close();
  process.stdout.write(JSON.stringify(result));
})().catch((e) => { console.error(e); process.exit(2); });
