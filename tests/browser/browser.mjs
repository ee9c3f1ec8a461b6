// A real browser for tests/e2e/serve.rs: Debian's chromium, driven by playwright-core.
//
//     node browser.mjs PLAN.json
//
// PLAN: {"base": "http://127.0.0.1:PORT", "chromium": "/usr/bin/chromium", "steps": [STEP...]}
// Each step is done in order in one page (its cookies kept), and what it saw is recorded:
//   {"do": "goto", "path": P}                   -> {url, status, text}
//   {"do": "fill", "selector": S, "value": V}   -> {}
//   {"do": "select", "selector": S, "value": V} -> {}
//   {"do": "click", "selector": S}              -> {url, status, text} (after the navigation)
//   {"do": "tap", "selector": S}                -> {} (a click that leaves the page where it is)
//   {"do": "wait", "selector": S}               -> {} (until S is on the page, 20 s at most)
//   {"do": "text", "selector": S}               -> {text}
//   {"do": "eval", "js": EXPR}                  -> {value}
//   {"do": "viewport", "width": W, "height": H} -> {}
//   {"do": "fresh"}                             -> {} (a new browser context: no cookies)
//   {"do": "cross_site_post", "action": PATH, "fields": {...}}
//       -> {status, text}: a page of another site (http://evil.test/) posts a form to PATH here
// A step that throws records {error}. Prints one JSON document: the list of what was seen.

import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const browser = await chromium.launch({ executablePath: plan.chromium, args: ["--no-sandbox"] });
let context = await browser.newContext();
let page = await context.newPage();
let last = null;
page.on("response", (r) => {
  if (r.request().isNavigationRequest()) last = r;
});

async function seen() {
  await page.waitForLoadState("load");
  return {
    url: page.url(),
    status: last ? last.status() : null,
    text: (await page.locator("body").innerText()).slice(0, 4000),
  };
}

async function step(s) {
  switch (s.do) {
    case "goto": {
      await page.goto(plan.base + s.path);
      return seen();
    }
    case "fill":
      await page.fill(s.selector, s.value);
      return {};
    case "select":
      await page.selectOption(s.selector, s.value);
      return {};
    case "click": {
      await Promise.all([page.waitForNavigation(), page.click(s.selector)]);
      return seen();
    }
    case "tap":
      await page.click(s.selector);
      return {};
    case "wait":
      await page.waitForSelector(s.selector, { state: "attached", timeout: 20000 });
      return {};
    case "text":
      return { text: await page.locator(s.selector).first().innerText() };
    case "eval":
      return { value: await page.evaluate(s.js) };
    case "viewport":
      await page.setViewportSize({ width: s.width, height: s.height });
      return {};
    case "fresh":
      await context.close();
      context = await browser.newContext();
      page = await context.newPage();
      page.on("response", (r) => {
        if (r.request().isNavigationRequest()) last = r;
      });
      return {};
    case "cross_site_post": {
      const inputs = Object.entries(s.fields || {})
        .map(([k, v]) => `<input name="${k}" value="${v}">`)
        .join("");
      const evil = `<html><body><form id="f" method="post" action="${plan.base}${s.action}">${inputs}</form>
        <script>document.getElementById("f").submit()</script></body></html>`;
      await page.route("http://evil.test/**", (route) =>
        route.fulfill({ status: 200, contentType: "text/html", body: evil }),
      );
      const answered = page.waitForResponse((r) => r.url().startsWith(plan.base + s.action));
      await page.goto("http://evil.test/");
      const response = await answered;
      await page.waitForLoadState("load");
      return { status: response.status(), text: (await page.locator("body").innerText()).slice(0, 2000) };
    }
    default:
      throw new Error(`no step ${s.do}`);
  }
}

const results = [];
for (const s of plan.steps) {
  try {
    results.push(await step(s));
  } catch (e) {
    results.push({ error: String(e.message || e).split("\n")[0] });
  }
}
await browser.close();
console.log(JSON.stringify(results));
