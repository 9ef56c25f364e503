// The labelled set of bench/knowledge.mjs (issue #36 item 3), generated deterministically (no
// randomness beyond a fixed-seed generator; `node bench/data/knowledge-set.mjs` rewrites
// bench/data/knowledge-set.json, which is committed beside this file).
//
// Three kinds of labelled query, each with exactly one relevant note:
//  1. the 106 hand-written pairs of knowledge-pairs.mjs (a note and a question in other words);
//  2. fact notes: a component's retry policy, timeout, owning team, settings file, incident,
//     deprecation, alert threshold, secret rotation, queue, cache, migration or flag, written as
//     a note, and a question a developer would ask about it, worded from a separate set of
//     phrasings with synonyms (the component by another name, the fact by another word), never a
//     sentence of the note;
//  3. code identifiers: a note about a function, class or setting named in camelCase, PascalCase
//     or snake_case, and a query naming it in another form (snake_case for camelCase and back, or
//     its words), as someone looks for code they half remember.
// The distractors are notes of the same kinds about other components (hard negatives: same
// template, other subject) and generic engineering notes; none shares the (kind, component) of a
// labelled fact note, so each query has one answer.
import { writeFileSync } from 'node:fs';
import { PAIRS } from './knowledge-pairs.mjs';

export function makeRng(seed) {
  let s = seed >>> 0;
  return () => {
    // mulberry32
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Components: the name a note uses, and names a developer might use for it in a question.
export const COMPONENTS = [
  ['billing service', ['invoicing backend', 'the thing that charges customers']],
  ['search API', ['lookup endpoint', 'the query service']],
  ['admin dashboard', ['back-office console', 'internal control panel']],
  ['mobile app', ['phone client', 'iOS and Android application']],
  ['job queue', ['background task runner', 'worker backlog']],
  ['auth module', ['login component', 'sign-in code']],
  ['reporting job', ['nightly report generator', 'analytics export batch']],
  ['CDN configuration', ['edge cache setup', 'content delivery network settings']],
  ['email sender', ['mail dispatcher', 'outgoing message service']],
  ['CSV importer', ['spreadsheet upload', 'bulk file ingestion']],
  ['GraphQL gateway', ['schema federation layer', 'API aggregation proxy']],
  ['notification hub', ['push alert service', 'user messaging fan-out']],
  ['inventory sync', ['stock level replication', 'warehouse count updater']],
  ['checkout flow', ['purchase funnel', 'cart payment steps']],
  ['analytics pipeline', ['event processing stream', 'tracking data flow']],
  ['feature-flag client', ['toggle SDK', 'rollout switch library']],
  ['audit exporter', ['compliance log shipper', 'security trail export']],
  ['thumbnail worker', ['image resizer', 'picture preview generator']],
  ['websocket server', ['realtime connection endpoint', 'live socket backend']],
  ['rate limiter', ['request throttling', 'traffic cap middleware']],
  ['tenant router', ['customer partition dispatcher', 'multi-tenant request routing']],
  ['pricing engine', ['price calculation service', 'quote computation']],
  ['PDF renderer', ['document printing service', 'printable invoice generator']],
  ['sitemap builder', ['crawler index generator', 'SEO url list job']],
  ['SSO bridge', ['single sign-on connector', 'SAML integration']],
  ['backup agent', ['snapshot daemon', 'data safety copier']],
  ['geo service', ['location lookup', 'address coordinates resolver']],
  ['translation loader', ['i18n bundle fetcher', 'localisation strings loader']],
  ['metrics collector', ['telemetry scraper', 'monitoring agent']],
  ['command-line tool', ['CLI', 'terminal utility']],
  ['order service', ['purchase records backend', 'sales order system']],
  ['recommendation model', ['suggestions engine', 'personalised picks ranker']],
  ['video transcoder', ['media conversion worker', 'clip encoding pipeline']],
  ['chat widget', ['support messenger', 'help bubble on the site']],
  ['shipping calculator', ['delivery cost estimator', 'postage quote service']],
  ['loyalty program service', ['rewards points backend', 'customer bonus ledger']],
  ['fraud detector', ['suspicious payment screening', 'chargeback risk scorer']],
  ['file upload service', ['attachment storage API', 'document intake endpoint']],
  ['scheduler', ['cron runner', 'timed job trigger']],
  ['data warehouse loader', ['ETL into the warehouse', 'BI table refresher']],
];

const TEAMS = ['payments', 'growth', 'platform', 'mobile', 'data', 'identity', 'storefront', 'infra', 'trust', 'media'];
const FILES = ['config/default.yaml', 'settings.toml', '.env.example', 'deploy/values.yaml', 'src/config.ts', 'infra/main.tf', 'helm/values-prod.yaml', 'config/limits.json'];
const SETTINGS = [['connection pool size', 'the number of database connections'], ['log level', 'how chatty the logging is'], ['batch size', 'how many records go in one chunk'], ['concurrency', 'the number of parallel workers']];
const CAUSES = [['an expired TLS certificate', 'a certificate that ran out'], ['a full disk on the primary database', 'storage running out on the main db'], ['a bad deploy that removed an index', 'a release that dropped a lookup table optimisation'], ['a DNS record pointing at the old load balancer', 'name resolution sending traffic to retired hardware'], ['a memory leak in the HTTP client', 'a process that kept growing until it was killed'], ['a retry storm after a provider blip', 'clients hammering us again and again after a brief upstream failure']];
const MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'December'];
const SECRETS = [['API key', 'access token'], ['database password', 'db login'], ['signing key', 'key used to sign tokens'], ['webhook secret', 'shared secret for callbacks']];
const QUEUES = ['Kafka topic', 'SQS queue', 'RabbitMQ exchange', 'Redis stream'];
const CACHES = [['Redis', 'in-memory store'], ['Memcached', 'memory cache'], ['a local LRU', 'an in-process cache']];

// Fact kinds: a note (title, content) and questions that ask for the fact in other words.
// `c` is the component's note name, `a` a name a developer would use instead.
export const FACTS = {
  retry: (r, c) => {
    const n = 2 + Math.floor(r() * 6), ms = [100, 200, 250, 500][Math.floor(r() * 4)];
    return {
      note: [`${c}: retries`, `The ${c} retries a failed upstream call ${n} times with exponential backoff from ${ms} ms, then marks the job as failed.`],
      q: [(a) => `how many attempts does the ${a} make before it gives up`, (a) => `does the ${a} try again when something it depends on errors out`],
    };
  },
  timeout: (r, c) => {
    const n = [2, 5, 10, 30, 60][Math.floor(r() * 5)];
    return {
      note: [`${c}: request timeout`, `Requests from the ${c} are aborted after ${n} seconds; the caller sees a 504 and may resubmit.`],
      q: [(a) => `how long can a call through the ${a} hang before it is cut off`, (a) => `what is the deadline for operations of the ${a}`],
    };
  },
  owner: (r, c) => {
    const t = TEAMS[Math.floor(r() * TEAMS.length)];
    return {
      note: [`${c}: ownership`, `The ${c} is maintained by the ${t} team; page them through #${t}-oncall for production problems.`],
      q: [(a) => `who should I contact when the ${a} breaks`, (a) => `which group is responsible for the ${a}`],
    };
  },
  settings: (r, c) => {
    const [s, sAlias] = SETTINGS[Math.floor(r() * SETTINGS.length)], f = FILES[Math.floor(r() * FILES.length)];
    return {
      note: [`${c}: ${s}`, `The ${c} reads its ${s} from ${f} at start-up; a change needs a restart to take effect.`],
      q: [(a) => `where do I adjust ${sAlias} for the ${a}`, (a) => `I changed ${sAlias} for the ${a} and nothing happened, why`],
    };
  },
  incident: (r, c) => {
    const [cause, causeAlias] = CAUSES[Math.floor(r() * CAUSES.length)], m = MONTHS[Math.floor(r() * 12)];
    return {
      note: [`postmortem: ${c} outage in ${m}`, `The ${c} outage in ${m} was caused by ${cause}; we added an alert and a checklist item so it cannot recur silently.`],
      q: [(a) => `what brought the ${a} down in ${m}`, (a) => `was the ${a} ever broken by ${causeAlias}`],
    };
  },
  deprecation: (r, c) => {
    const q = 1 + Math.floor(r() * 4), v = 1 + Math.floor(r() * 3);
    return {
      note: [`${c}: v${v} API deprecated`, `Version ${v} of the ${c} API is deprecated; clients must move to v${v + 1} before the end of Q${q}, when v${v} is switched off.`],
      q: [(a) => `is the old interface of the ${a} going away, and by when`, (a) => `deadline for migrating callers of the ${a} to the newer contract`],
    };
  },
  alert: (r, c) => {
    const p = [200, 300, 500, 800, 1200][Math.floor(r() * 5)];
    return {
      note: [`${c}: latency alert`, `The ${c} pages the on-call engineer when its p99 latency stays above ${p} ms for ten minutes.`],
      q: [(a) => `at what response time do we get woken up for the ${a}`, (a) => `how slow does the ${a} have to be before someone is notified`],
    };
  },
  rotation: (r, c) => {
    const [sec, secAlias] = SECRETS[Math.floor(r() * SECRETS.length)];
    return {
      note: [`${c}: rotating the ${sec}`, `To rotate the ${sec} of the ${c}, create the new one in the vault, deploy with both accepted, then revoke the old one after a day.`],
      q: [(a) => `procedure for replacing the ${secAlias} used by the ${a}`, (a) => `how to swap the ${secAlias} of the ${a} without downtime`],
    };
  },
  queue: (r, c) => {
    const qu = QUEUES[Math.floor(r() * QUEUES.length)];
    return {
      note: [`${c}: messaging`, `The ${c} publishes its events to a ${qu}; consumers must be idempotent because delivery is at least once.`],
      q: [(a) => `can the ${a} send the same event twice`, (a) => `what transport carries the ${a} notifications to other systems`],
    };
  },
  cache: (r, c) => {
    const [k, kAlias] = CACHES[Math.floor(r() * CACHES.length)], m = [1, 5, 15, 60][Math.floor(r() * 4)];
    return {
      note: [`${c}: caching`, `Responses of the ${c} are cached in ${k} for ${m} minutes; a write evicts the affected keys.`],
      q: [(a) => `why might the ${a} show stale data for a while`, (a) => `does the ${a} keep answers in ${kAlias}, and for how long`],
    };
  },
  migration: (r, c) => {
    const from = ['MySQL', 'MongoDB', 'a shared Postgres'][Math.floor(r() * 3)];
    return {
      note: [`${c}: database move`, `The ${c} was moved off ${from} to its own Postgres cluster; the old tables are read-only until the cleanup.`],
      q: [(a) => `which storage does the ${a} use now`, (a) => `can I still write to the legacy tables of the ${a}`],
    };
  },
  flag: (r, c) => {
    const pct = [1, 5, 10, 25, 50][Math.floor(r() * 5)];
    return {
      note: [`${c}: gradual rollout`, `The new version of the ${c} is behind a flag enabled for ${pct} percent of accounts; widen it only after a clean day of error rates.`],
      q: [(a) => `how many customers get the new ${a} so far`, (a) => `rules for expanding the staged release of the ${a}`],
    };
  },
};

// Code identifiers: the words of a function, class or setting; how a note names it and how a
// query does (another case form, or the words).
const IDENT_WORDS = [
  ['calculate', 'invoice', 'total'], ['parse', 'webhook', 'signature'], ['refresh', 'access', 'token'], ['retry', 'with', 'backoff'],
  ['normalize', 'phone', 'number'], ['build', 'search', 'index'], ['resolve', 'tenant', 'id'], ['max', 'pool', 'size'],
  ['render', 'pdf', 'receipt'], ['validate', 'coupon', 'code'], ['compute', 'shipping', 'rate'], ['schedule', 'nightly', 'export'],
  ['encode', 'cursor', 'token'], ['merge', 'duplicate', 'accounts'], ['flush', 'metrics', 'buffer'], ['load', 'feature', 'flags'],
  ['sanitize', 'html', 'input'], ['rotate', 'log', 'files'], ['compress', 'image', 'upload'], ['fetch', 'exchange', 'rates'],
  ['enqueue', 'email', 'job'], ['verify', 'saml', 'assertion'], ['estimate', 'delivery', 'date'], ['aggregate', 'daily', 'revenue'],
  ['detect', 'fraud', 'pattern'], ['sync', 'inventory', 'levels'], ['translate', 'error', 'message'], ['hash', 'user', 'password'],
  ['throttle', 'api', 'requests'], ['archive', 'old', 'orders'], ['split', 'payment', 'intent'], ['warm', 'cache', 'entries'],
];
const cap = (w) => w[0].toUpperCase() + w.slice(1);
const camel = (ws) => ws[0] + ws.slice(1).map(cap).join('');
const pascal = (ws) => ws.map(cap).join('');
const snake = (ws) => ws.join('_');
const IDENT_FILES = ['src/billing/invoice.ts', 'src/webhooks/verify.ts', 'lib/auth/session.py', 'src/util/retry.ts', 'app/models/contact.rb', 'src/search/indexer.go', 'src/tenancy/router.ts', 'config/database.yml'];

function identNote(r, ws, i) {
  const form = i % 3; // 0 camelCase function, 1 PascalCase class, 2 snake_case setting or function
  const name = form === 0 ? camel(ws) : form === 1 ? pascal(ws) : snake(ws);
  const file = IDENT_FILES[Math.floor(r() * IDENT_FILES.length)];
  const note = form === 1
    ? [`${name} class`, `${name} in ${file} wraps the logic and is constructed once per request; tests stub it with a fake.`]
    : form === 0
      ? [`${name}()`, `${name}() in ${file} is the single place for this computation; call it instead of copying the arithmetic.`]
      : [`${name}`, `${name} is read from ${file}; keep it in sync with the value in the staging environment.`];
  // The query names it in another form: snake_case for camelCase or PascalCase, camelCase for
  // snake_case, or its plain words.
  const query = i % 2 === 0 ? (form === 2 ? `where is ${camel(ws)} defined` : `where is ${snake(ws)} defined`) : `code that does ${ws.join(' ')}`;
  return { note, query, identifier: name };
}

/** Generic filler (as the first benchmark had): short notes over the components. */
const THINGS = ['queue depth', 'response time', 'heap size', 'open connections', 'retry count', 'payload size', 'error rate', 'lock wait'];
const DEPS = ['lodash', 'axios', 'express', 'pg', 'ioredis', 'zod', 'luxon', 'sharp', 'bullmq', 'pino', 'fastify', 'kafkajs'];
const PROBLEMS = ['a spike in 500 errors', 'duplicate rows', 'a slow page', 'a memory spike', 'missing events', 'a deadlock', 'wrong totals', 'a crash loop'];
const FIXES = ['adding an index', 'a retry with jitter', 'a larger pool', 'a schema change', 'batching writes', 'a timeout', 'a cache', 'pinning the version'];
const pick = (r, a) => a[Math.floor(r() * a.length)];
const GENERIC = [
  (r, c) => [`${c} thresholds`, `The ${c} logs a warning when the ${pick(r, THINGS)} exceeds ${Math.floor(r() * 900 + 100)}.`],
  (r, c) => [`${c} uses ${pick(r, DEPS)}`, `The ${c} depends on ${pick(r, DEPS)} ${Math.floor(r() * 9) + 1}.${Math.floor(r() * 20)}; check the changelog before upgrading.`],
  (r, c) => [`bug in ${c}`, `A bug in the ${c} caused ${pick(r, PROBLEMS)} in week ${Math.floor(r() * 52) + 1}; it was fixed by ${pick(r, FIXES)}.`],
  (r, c) => [`${c} metrics`, `The ${c} exports the ${pick(r, THINGS)} and the ${pick(r, THINGS)} as metrics for its dashboard.`],
  (r, c) => [`${c} calls ${pick(r, COMPONENTS)[0]}`, `The ${c} calls the ${pick(r, COMPONENTS)[0]} synchronously; if it is slow, ${pick(r, PROBLEMS)} can follow.`],
  (r, c) => [`${c} tests`, `The tests of the ${c} need the ${pick(r, DEPS)} mock and take about ${Math.floor(r() * 50) + 5} seconds.`],
];

/**
 * The set: { labelled: [{ title, content, query, source }], distractor(i) }. `distractor(i)` is the
 * i-th distractor note (deterministic, any number of them), never about a labelled (kind, component).
 */
export function buildSet() {
  const r = makeRng(36);
  const labelled = PAIRS.map(([title, content, query]) => ({ title, content, query, source: 'hand-written' }));
  const kinds = Object.keys(FACTS);
  const used = new Set();
  // Fact notes: every kind for 10 components each (120 queries), components spread over kinds.
  for (let k = 0; k < kinds.length; k++) {
    for (let j = 0; j < 10; j++) {
      const ci = (k * 7 + j * 3) % COMPONENTS.length;
      const [c, aliases] = COMPONENTS[ci];
      const f = FACTS[kinds[k]](r, c);
      const qf = f.q[j % f.q.length];
      const alias = aliases[j % aliases.length];
      labelled.push({ title: f.note[0], content: f.note[1], query: qf(alias), source: `fact:${kinds[k]}` });
      used.add(`${kinds[k]}\u0000${ci}`);
    }
  }
  // Code identifiers: 32 notes, each with a query naming the identifier another way.
  IDENT_WORDS.forEach((ws, i) => {
    const x = identNote(r, ws, i);
    labelled.push({ title: x.note[0], content: x.note[1], query: x.query, source: 'identifier', identifier: x.identifier });
  });
  const free = [];
  for (const k of kinds) for (let ci = 0; ci < COMPONENTS.length; ci++) if (!used.has(`${k}\u0000${ci}`)) free.push([k, ci]);
  return { labelled, free };
}

/** The i-th distractor: a fact note of a free (kind, component), or a generic note. Deterministic. */
export function distractor(set, i) {
  const r = makeRng(1000 + i);
  if (i % 2 === 0) {
    const [k, ci] = set.free[(i / 2) % set.free.length];
    const f = FACTS[k](r, COMPONENTS[ci][0]);
    return [f.note[0], f.note[1]];
  }
  return GENERIC[Math.floor(r() * GENERIC.length)](r, COMPONENTS[Math.floor(r() * COMPONENTS.length)][0]);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const set = buildSet();
  const out = { generatedBy: 'bench/data/knowledge-set.mjs', queries: set.labelled.length, labelled: set.labelled, distractorSample: Array.from({ length: 40 }, (_, i) => distractor(set, i)) };
  writeFileSync(new URL('./knowledge-set.json', import.meta.url), JSON.stringify(out, null, 1) + '\n');
  const by = {};
  for (const l of set.labelled) by[l.source.split(':')[0]] = (by[l.source.split(':')[0]] ?? 0) + 1;
  console.log(`${set.labelled.length} labelled queries`, by, `${set.free.length} free (kind, component) pairs for distractors`);
}
