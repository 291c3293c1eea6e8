// acp_client.mjs - a test client for ACP agents on stdio, built on the
// official SDK (@agentclientprotocol/sdk 2.x), so that what an agent writes
// is checked against the protocol's own schema: the SDK parses every
// session/update and every request of the agent with its zod schemas, and
// this client checks the answers to its own requests with them too.
//
//   node acp_client.mjs [--cwd DIR] [--prompt TEXT | --prompt-json BLOCKS]...
//                       [--cancel-after-updates N]
//                       [--no-fs] [--refuse-writes] [--timeout-ms MS]
//                       [--load [--prompt TEXT]...] -- AGENT-COMMAND [ARGS...]
//
// It spawns the agent, runs initialize (declaring fs read and write, both
// confined to the cwd, unless --no-fs), session/new and each prompt in turn.
// --cancel-after-updates N sends session/cancel once a turn has brought N
// session/updates. --load ends the first agent (stdin closed: it must exit
// 0), starts the command again, session/loads the first session and collects
// the updates it replays; prompts given after --load run in that session
// then. --refuse-writes answers fs/write_text_file with an error.
// --prompt-json gives a prompt as its JSON list of ContentBlocks (checked
// against the schema before it is sent); the replay check of --load
// covers text prompts only.
//
// Output: one JSON line per message the agent sent ({"agent":1|2,
// "message":...}), then {"summary":{...}}: ok, errors, the session id, each
// turn (prompt, stopReason, updates by kind, the reply's text, the last
// status of each tool call, updates after the answer) and, with --load, what
// was replayed (updates by kind, and whether the replay equals the first
// process's updates plus the prompts as user_message_chunks). Exit status 0
// if there were no errors, 1 otherwise, 2 on bad usage.
//
// Errors: a message the schema refuses, a response to no request, a line of
// stdout that is not JSON-RPC, a call of a method the client did not offer
// (fs/* under --no-fs, terminal/*), an fs path outside the cwd, an error
// answer to one of our requests, an agent that dies or does not exit on EOF,
// the timeout.
import * as acp from "@agentclientprotocol/sdk";
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { promises as fsp } from "node:fs";
import path from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";
import { isDeepStrictEqual } from "node:util";

function usage(why) {
    process.stderr.write(
        `acp_client: ${why}\nusage: node acp_client.mjs [--cwd DIR] [--prompt TEXT | --prompt-json BLOCKS]... ` +
            "[--cancel-after-updates N] [--no-fs] [--refuse-writes] [--timeout-ms MS] " +
            "[--load [--prompt TEXT]...] -- AGENT-COMMAND [ARGS...]\n",
    );
    process.exit(2);
}

const opt = { cwd: process.cwd(), prompts: [], afterLoad: [], cancelAfter: 0, fs: true, refuseWrites: false, timeoutMs: 60000, load: false, command: [] };
{
    const argv = process.argv.slice(2);
    const value = (i) => (i + 1 < argv.length ? argv[i + 1] : usage(`${argv[i]} wants a value`));
    const count = (i, min) => {
        const n = Number(value(i));
        return Number.isInteger(n) && n >= min ? n : usage(`${argv[i]} wants a whole number from ${min}`);
    };
    let i = 0;
    for (; i < argv.length && argv[i] !== "--"; i++) {
        const a = argv[i];
        if (a === "--cwd") opt.cwd = value(i++);
        else if (a === "--prompt") (opt.load ? opt.afterLoad : opt.prompts).push(value(i++));
        else if (a === "--prompt-json") {
            let blocks;
            try {
                blocks = JSON.parse(value(i++));
            } catch (e) {
                usage(`--prompt-json wants a JSON list of content blocks: ${e.message}`);
            }
            if (!Array.isArray(blocks)) usage("--prompt-json wants a JSON list of content blocks");
            (opt.load ? opt.afterLoad : opt.prompts).push(blocks);
        }
        else if (a === "--cancel-after-updates") opt.cancelAfter = count(i++, 1);
        else if (a === "--timeout-ms") opt.timeoutMs = count(i++, 1);
        else if (a === "--no-fs") opt.fs = false;
        else if (a === "--refuse-writes") opt.refuseWrites = true;
        else if (a === "--load") opt.load = true;
        else usage(`unknown option '${a}'`);
    }
    opt.command = argv.slice(i + 1);
    if (opt.command.length === 0) usage("no agent command after --");
    opt.cwd = path.resolve(opt.cwd);
}

// The SDK's schemas, to check the answers to our requests, which the SDK
// passes on unchecked. They are not among the package's exports, so they
// are imported by path, next to the entry point.
const entry = createRequire(import.meta.url).resolve("@agentclientprotocol/sdk");
const z = await import(pathToFileURL(path.join(path.dirname(entry), "..", "schema", "zod.gen.js")).href);

const errors = [];
const error = (what) => {
    errors.push(what);
    process.stderr.write(`acp_client: ${what}\n`);
};
// The SDK reports what it refuses (a notification its schema rejects, a
// response to no request, an invalid message) with console.error: each is
// an error of the agent's.
const consoleError = console.error;
console.error = (...args) => {
    error(`SDK: ${args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" ")}`);
};

const print = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

function schemaCheck(schema, value, what) {
    const r = schema.safeParse(value);
    if (!r.success) {
        const issue = r.error.issues[0];
        error(`${what} does not fit the schema (${issue.path.join(".") || "the value"}: ${issue.message}): ` +
              JSON.stringify(value).slice(0, 300));
    }
}

// Inside the cwd, or an error for the agent (and for us).
function confined(p) {
    if (typeof p !== "string" || !path.isAbsolute(p)) {
        error(`fs path is not absolute: ${JSON.stringify(p)}`);
        throw acp.RequestError.invalidParams(undefined, "path must be absolute");
    }
    const r = path.resolve(p);
    if (r !== opt.cwd && !r.startsWith(opt.cwd + path.sep)) {
        error(`fs path outside the cwd: ${p}`);
        throw acp.RequestError.invalidParams(undefined, "path outside the session's cwd");
    }
    return r;
}

let sessionId = null;
const knownSession = (s) => {
    if (s !== sessionId) error(`a request for an unknown session ${JSON.stringify(s)}`);
};
const fsCalls = [];

const app = acp
    .client({ name: "parley-acp-test-client" })
    .onRequest("fs/read_text_file", async ({ params }) => {
        fsCalls.push({ method: "fs/read_text_file", path: params.path });
        if (!opt.fs) {
            error("the agent called fs/read_text_file, which the client did not offer");
            throw acp.RequestError.methodNotFound("fs/read_text_file");
        }
        knownSession(params.sessionId);
        const p = confined(params.path);
        let text;
        try {
            text = await fsp.readFile(p, "utf8");
        } catch (e) {
            if (e.code === "ENOENT") throw acp.RequestError.resourceNotFound(params.path);
            throw acp.RequestError.internalError(undefined, e.message);
        }
        if (params.line != null || params.limit != null) {
            const from = Math.max(1, params.line ?? 1) - 1;
            const lines = text.split("\n");
            text = lines.slice(from, params.limit != null ? from + params.limit : undefined).join("\n");
        }
        return { content: text };
    })
    .onRequest("fs/write_text_file", async ({ params }) => {
        fsCalls.push({ method: "fs/write_text_file", path: params.path });
        if (!opt.fs) {
            error("the agent called fs/write_text_file, which the client did not offer");
            throw acp.RequestError.methodNotFound("fs/write_text_file");
        }
        knownSession(params.sessionId);
        const p = confined(params.path);
        if (opt.refuseWrites) throw acp.RequestError.internalError(undefined, "writes are refused (--refuse-writes)");
        await fsp.writeFile(p, params.content);
        return {};
    })
    .onRequest("session/request_permission", async ({ params }) => {
        knownSession(params.sessionId);
        if (turn?.cancelSent) return { outcome: { outcome: "cancelled" } };
        const allow = params.options.find((o) => o.kind === "allow_once") ?? params.options[0];
        return allow ? { outcome: { outcome: "selected", optionId: allow.optionId } } : { outcome: { outcome: "cancelled" } };
    })
    .onRequest("*", ({ method }) => {
        error(`the agent called ${method}, which the client did not offer`);
        throw acp.RequestError.methodNotFound(method);
    })
    .onNotification("session/update", () => {}) // the SDK checks it against the schema first
    .onNotification("*", ({ method }) => {
        error(`a notification the client does not know: ${method}`);
    });

let turn = null; // the prompt turn that runs: its record in the summary
let loading = null; // the session/load that runs: its updates
const live = []; // the first process's updates of our session, in order

// Every message from the agent, in the order of the wire, before the SDK
// sees it: printed, counted, checked.
function observeIn(n, msg, ctx) {
    print({ agent: n, message: msg });
    if (msg.jsonrpc !== "2.0") error(`a message without "jsonrpc":"2.0": ${JSON.stringify(msg).slice(0, 200)}`);
    if (msg.method !== "session/update") return;
    schemaCheck(z.zSessionNotification, msg.params, "a session/update");
    const u = msg.params?.update ?? {};
    if (msg.params?.sessionId !== sessionId) {
        error(`a session/update for another session: ${msg.params?.sessionId}`);
        return;
    }
    if (loading) {
        loading.updates.push(u);
        return;
    }
    if (n === 1) live.push(u);
    if (!turn) {
        error(`a session/update outside a prompt turn: ${u.sessionUpdate}`);
        return;
    }
    if (turn.stopReason !== undefined) turn.updatesAfterAnswer++;
    turn.updates++;
    turn.kinds[u.sessionUpdate] = (turn.kinds[u.sessionUpdate] ?? 0) + 1;
    if (u.sessionUpdate === "agent_message_chunk" && u.content?.type === "text") turn.text += u.content.text;
    if (u.sessionUpdate === "tool_call" || u.sessionUpdate === "tool_call_update") {
        if (u.sessionUpdate === "tool_call" && u.toolCallId in turn.toolCalls)
            error(`tool call id ${u.toolCallId} used twice in a turn`);
        if (u.sessionUpdate === "tool_call_update" && !(u.toolCallId in turn.toolCalls))
            error(`tool_call_update for an unknown tool call ${u.toolCallId}`);
        turn.toolCalls[u.toolCallId] = u.status ?? turn.toolCalls[u.toolCallId] ?? "pending";
    }
    if (opt.cancelAfter > 0 && turn.updates === opt.cancelAfter && !turn.cancelSent) {
        turn.cancelSent = true;
        ctx().notify("session/cancel", { sessionId }).catch((e) => error(`session/cancel: ${e.message}`));
    }
}

// The agent's stdout as bytes: every line must be one JSON object (ACP's
// framing). The SDK skips what is not, answering with an error, and it
// accepts a line the JSON.parse of which is not compact; both are errors
// of the agent's here.
function lineCheck(n) {
    const decoder = new TextDecoder("utf-8", { fatal: true });
    let held = [];
    const check = (bytes) => {
        let text;
        try {
            text = decoder.decode(bytes);
        } catch {
            error(`agent ${n} wrote a line that is not UTF-8`);
            return;
        }
        if (text.trim() === "") return; // the SDK skips blank lines, and so may we
        if (text.endsWith("\r")) error(`agent ${n} ended a line with CR LF`);
        try {
            const v = JSON.parse(text);
            if (v === null || typeof v !== "object" || Array.isArray(v)) throw new Error("not an object");
        } catch {
            error(`agent ${n} wrote a line that is not a JSON-RPC message: ${JSON.stringify(text.slice(0, 200))}`);
        }
    };
    return new TransformStream({
        transform(chunk, controller) {
            let from = 0;
            for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, from)) {
                held.push(chunk.subarray(from, i));
                check(Buffer.concat(held));
                held = [];
                from = i + 1;
            }
            if (from < chunk.length) held.push(chunk.slice(from));
            controller.enqueue(chunk);
        },
        flush() {
            if (held.length > 0) error(`agent ${n}'s last line has no newline`);
        },
    });
}

function tap(fn) {
    return new TransformStream({
        transform(msg, controller) {
            fn(msg);
            controller.enqueue(msg);
        },
    });
}

// Start the agent: its process, and the SDK's stream on its stdio, tapped.
const children = [];
function start(n) {
    const [cmd, ...args] = opt.command;
    const child = spawn(cmd, args, { cwd: opt.cwd, stdio: ["pipe", "pipe", "inherit"] });
    children.push(child);
    const exited = new Promise((resolve) => child.on("close", (code, signal) => resolve({ code, signal })));
    child.on("error", (e) => error(`cannot start ${cmd}: ${e.message}`));
    child.stdin.on("error", () => {}); // it may be gone: what it said is checked elsewhere
    const raw = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout).pipeThrough(lineCheck(n)));
    let context = null;
    const stream = { readable: raw.readable.pipeThrough(tap((m) => observeIn(n, m, () => context))), writable: raw.writable };
    return { child, exited, stream, setContext: (c) => (context = c) };
}

// End an agent: stdin closed, it must exit 0 soon.
async function stop(agent, n) {
    agent.child.stdin.end();
    let timer;
    const late = new Promise((resolve) => (timer = setTimeout(() => resolve(null), 10000)));
    const r = await Promise.race([agent.exited, late]);
    clearTimeout(timer);
    if (r === null) {
        error(`agent ${n} did not exit within 10 s of the end of its stdin`);
        agent.child.kill("SIGKILL");
        await agent.exited;
    } else if (r.code !== 0) {
        error(`agent ${n} exited ${r.code ?? "by signal " + r.signal} after the end of its stdin`);
    }
}

async function request(ctx, method, params, schema) {
    try {
        const r = await ctx.request(method, params);
        if (schema) schemaCheck(schema, r, `the answer to ${method}`);
        return r;
    } catch (e) {
        error(`${method} failed: ${e.code ?? ""} ${e.message}`);
        return null;
    }
}

const summary = { ok: false, errors, command: opt.command, cwd: opt.cwd, sessionId: null, turns: [], fsCalls };

async function initialize(ctx, n) {
    const init = await request(
        ctx,
        "initialize",
        {
            protocolVersion: acp.PROTOCOL_VERSION,
            clientCapabilities: { fs: { readTextFile: opt.fs, writeTextFile: opt.fs }, terminal: false },
            clientInfo: { name: "parley-acp-test-client", version: "1" },
        },
        z.zInitializeResponse,
    );
    if (init && init.protocolVersion !== acp.PROTOCOL_VERSION) error(`agent ${n} speaks protocol version ${init.protocolVersion}`);
    if (n === 1 && init) summary.agent = { protocolVersion: init.protocolVersion, agentInfo: init.agentInfo, agentCapabilities: init.agentCapabilities };
    return init;
}

async function prompts(ctx, list) {
    for (const text of list) {
        turn = { prompt: text, stopReason: undefined, updates: 0, kinds: {}, text: "", toolCalls: {}, cancelSent: false, updatesAfterAnswer: 0 };
        summary.turns.push(turn);
        const params = { sessionId, prompt: typeof text === "string" ? [{ type: "text", text }] : text };
        schemaCheck(z.zPromptRequest, params, "our session/prompt");
        const r = await request(ctx, "session/prompt", params, z.zPromptResponse);
        turn.stopReason = r?.stopReason ?? null;
        if (turn.cancelSent && r && r.stopReason !== "cancelled") error(`a cancelled turn ended with ${r.stopReason}`);
    }
}

async function main() {
    const first = start(1);
    await app.connectWith(first.stream, async (ctx) => {
        first.setContext(ctx);
        if (!(await initialize(ctx, 1))) return;
        const s = await request(ctx, "session/new", { cwd: opt.cwd, mcpServers: [] }, z.zNewSessionResponse);
        if (!s) return;
        sessionId = summary.sessionId = s.sessionId;
        await prompts(ctx, opt.prompts);
        turn = null;
    }).catch((e) => error(`agent 1: ${e.message}`));
    await stop(first, 1);
    if (!opt.load || sessionId === null) return;

    const second = start(2);
    await app.connectWith(second.stream, async (ctx) => {
        second.setContext(ctx);
        const init = await initialize(ctx, 2);
        if (!init) return;
        if (init.agentCapabilities?.loadSession !== true) error("session/load asked of an agent without loadSession");
        loading = { updates: [] };
        const r = await request(ctx, "session/load", { sessionId, cwd: opt.cwd, mcpServers: [] }, z.zLoadSessionResponse);
        const got = loading.updates;
        loading = null;
        const kinds = {};
        for (const u of got) kinds[u.sessionUpdate] = (kinds[u.sessionUpdate] ?? 0) + 1;
        // what the first process sent, with each prompt before its turn's updates
        const expected = [];
        let k = 0;
        for (const t of summary.turns) {
            expected.push({ sessionUpdate: "user_message_chunk", content: { type: "text", text: t.prompt } });
            expected.push(...live.slice(k, k + t.updates));
            k += t.updates;
        }
        const texts = summary.turns.every((t) => typeof t.prompt === "string");
        summary.load = { answered: r !== null, updates: got.length, kinds, matchesLive: texts ? isDeepStrictEqual(got, expected) : null };
        await prompts(ctx, opt.afterLoad);
        turn = null;
    }).catch((e) => error(`agent 2: ${e.message}`));
    await stop(second, 2);
}

const timer = setTimeout(() => {
    error(`not done within ${opt.timeoutMs} ms`);
    for (const c of children) c.kill("SIGKILL");
    print({ summary });
    process.exit(1);
}, opt.timeoutMs);
try {
    await main();
} catch (e) {
    error(`client: ${e.stack ?? e}`);
}
clearTimeout(timer);
console.error = consoleError;
summary.ok = errors.length === 0;
print({ summary });
process.exitCode = summary.ok ? 0 : 1;
