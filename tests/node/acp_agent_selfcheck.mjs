#!/usr/bin/env node
// acp_agent_selfcheck.mjs - drives every behaviour of acp_agent.mjs with the
// official SDK's client side (@agentclientprotocol/sdk 2.4.0: acp.client(),
// connect(), ctx.request/notify, ActiveSession) over a child process, and
// checks the exact updates and stop reasons each produces, as the agent's
// header documents them. The client's fs methods confine paths to the
// session's cwd (after resolving symlinks); permission requests are answered
// as each check scripts; cancel, crash and crash-load restarts are driven as
// parley would. Every update is compared as it came off the wire (raw JSON)
// and must also pass the SDK's own session/update parser.
//
//   node tests/node/acp_agent_selfcheck.mjs [NAME...]
//
// With NAMEs, only the checks whose names start with one of them run. Temp
// files go under $TMPDIR and are removed. Prints "ok NAME (MS ms)" per check
// and "passed N checks" at the end; on the first failure, "FAIL NAME: ..."
// (with the agent's stderr) and exit status 1. No sleeps: every wait is
// for a message or an exit, bounded by a deadline that fails the check.

import * as acp from "@agentclientprotocol/sdk";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Readable, Writable } from "node:stream";
import { StringDecoder } from "node:string_decoder";
import { fileURLToPath } from "node:url";

const AGENT = fileURLToPath(new URL("./acp_agent.mjs", import.meta.url));
const DEADLINE_MS = Number(process.env.ACP_SELFCHECK_DEADLINE_MS || 60000);
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), "acp-selfcheck-"));
const BIG = 17 * 1024 * 1024;

function deadline(promise, what, ms = DEADLINE_MS) {
    let timer;
    const expired = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
    });
    return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}

let dirs = 0;
function freshDir(name) {
    const d = path.join(TMP, `${++dirs}-${name}`);
    fs.mkdirSync(d, { recursive: true });
    return d;
}

// Shorthands for the updates the agent documents.
const chunk = (text) => ({ sessionUpdate: "agent_message_chunk", content: { type: "text", text } });
const thought = (text) => ({ sessionUpdate: "agent_thought_chunk", content: { type: "text", text } });
const user = (text) => ({ sessionUpdate: "user_message_chunk", content: { type: "text", text } });
const textContent = (text) => ({ type: "content", content: { type: "text", text } });

// -------------------------------------------------------- the agent ---
// One agent process with an SDK client connected to it. rawLines has every
// stdout line as bytes decoded; messages every JSON-RPC message the SDK read
// (before the SDK's own validation); agentRequests the requests the agent sent.
class AgentProcess {
    constructor(behaviour, opts = {}) {
        this.behaviour = behaviour;
        this.opts = opts;
        this.rawLines = [];
        this.messages = [];
        this.parsedUpdates = [];
        this.agentRequests = [];
        this.waiters = new Set();
        this.stderr = "";
        this.child = spawn(process.execPath, [AGENT, behaviour], {
            stdio: ["pipe", "pipe", "pipe"],
            env: { ...process.env, ...(opts.env || {}) },
        });
        this.child.stderr.setEncoding("utf8");
        this.child.stderr.on("data", (d) => {
            this.stderr += d;
        });
        this.child.stdin.on("error", () => {}); // EPIPE after the agent exits
        this.exited = new Promise((resolve) => {
            this.child.on("exit", (code, signal) => resolve({ code, signal }));
        });

        // only the new bytes are scanned, so a long line costs O(its length)
        const decoder = new StringDecoder("utf8");
        let partial = [];
        const tapBytes = new TransformStream({
            transform: (bytes, ctl) => {
                const parts = decoder.write(bytes).split("\n");
                const last = parts.pop();
                for (const part of parts) {
                    partial.push(part);
                    this.rawLines.push(partial.join(""));
                    partial = [];
                }
                partial.push(last);
                if (parts.length) this.wake();
                ctl.enqueue(bytes);
            },
        });
        const nd = acp.ndJsonStream(
            Writable.toWeb(this.child.stdin),
            Readable.toWeb(this.child.stdout).pipeThrough(tapBytes),
        );
        const tapMessages = new TransformStream({
            transform: (m, ctl) => {
                this.messages.push(m);
                this.wake();
                ctl.enqueue(m);
            },
        });
        this.app = this.makeClient();
        this.conn = this.app.connect({ readable: nd.readable.pipeThrough(tapMessages), writable: nd.writable });
        this.agent = this.conn.agent;
    }

    makeClient() {
        const o = this.opts;
        const record = (c) => this.agentRequests.push({ method: c.method, params: c.params });
        return acp.client({ name: "acp-selfcheck" })
            .onRequest("session/request_permission", async (c) => {
                record(c);
                if (!o.permission) throw new Error("no permission answer scripted");
                return o.permission(c.params, c.agent);
            })
            .onRequest("fs/read_text_file", async (c) => {
                record(c);
                return o.fs.read(c.params);
            })
            .onRequest("fs/write_text_file", async (c) => {
                record(c);
                return o.fs.write(c.params);
            })
            .onNotification("session/update", (c) => {
                this.parsedUpdates.push(c.params);
            });
    }

    wake() {
        for (const w of [...this.waiters]) w();
    }

    // Resolves with pred()'s first truthy value, checked now and on every line.
    waitFor(pred, what) {
        let waiter;
        const p = new Promise((resolve) => {
            waiter = () => {
                const v = pred();
                if (v) resolve(v);
            };
            this.waiters.add(waiter);
            waiter();
        });
        return deadline(p, what).finally(() => this.waiters.delete(waiter));
    }

    // The session/update notifications for sessionId from messages[from] on.
    updatesSince(from, sessionId) {
        return this.messages.slice(from)
            .filter((m) => m.method === "session/update" && m.params?.sessionId === sessionId)
            .map((m) => m.params.update);
    }

    async initialize(clientCapabilities, protocolVersion = 1) {
        const init = await deadline(this.agent.request("initialize", {
            protocolVersion,
            clientCapabilities,
            clientInfo: { name: "acp-selfcheck", version: "1.0.0" },
        }), "initialize response");
        assert.deepEqual(init, {
            protocolVersion: 1,
            agentCapabilities: {
                loadSession: this.behaviour === "crash-load",
                promptCapabilities: { image: false, audio: false, embeddedContext: false },
            },
            authMethods: [],
            agentInfo: { name: "parley-acp-test-agent", title: `parley test agent (${this.behaviour})`, version: "1.0.0" },
        }, "initialize response");
        return init;
    }

    async newSession(cwd) {
        const res = await deadline(this.agent.request("session/new", { cwd, mcpServers: [] }), "session/new response");
        assert.match(res.sessionId, /^sess-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
        return res.sessionId;
    }

    // Starts a prompt; returns {done, from}: done resolves with the response.
    startPrompt(sessionId, text) {
        const from = this.messages.length;
        const done = this.agent.request("session/prompt", { sessionId, prompt: [{ type: "text", text }] });
        done.catch(() => {});
        return { done, from };
    }

    // One whole turn: its updates as sent and the stopReason.
    async turn(sessionId, text) {
        const { done, from } = this.startPrompt(sessionId, text);
        const parsedFrom = this.parsedUpdates.length;
        const res = await deadline(done, `session/prompt response (${this.behaviour})`);
        const updates = this.updatesSince(from, sessionId);
        this.checkParsed(parsedFrom, updates);
        return { updates, stopReason: res.stopReason };
    }

    // The SDK's parser accepted as many updates as came off the wire.
    checkParsed(parsedFrom, updates) {
        const parsed = this.parsedUpdates.slice(parsedFrom);
        assert.equal(parsed.length, updates.length, "updates the SDK's session/update parser accepted");
    }

    hasUpdate(from, sessionId, pred) {
        return () => this.updatesSince(from, sessionId).find(pred);
    }

    // Closes stdin; the agent must exit (status want) without being signalled.
    async finish(want = 0) {
        this.conn.close();
        this.child.stdin.end();
        const ex = await deadline(this.exited, `exit of '${this.behaviour}' after stdin EOF`);
        assert.deepEqual(ex, { code: want, signal: null }, `exit of '${this.behaviour}'`);
    }

    kill() {
        if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGKILL");
    }
}

// ---------------------------------------------------- fs for clients ---
function within(root, p) {
    const rel = path.relative(root, p);
    return rel === "" || (!rel.startsWith("..") && !path.isAbsolute(rel));
}

// A client's fs confined to cwd: the path, with symlinks resolved (for a
// write: those of its folder, and of the file if it is a link), must stay in
// realpath(cwd).
function confiningFs(cwd) {
    const root = fs.realpathSync(cwd);
    const refuse = (p, why) => {
        throw new acp.RequestError(-32602, `refused: ${why}`, { path: p });
    };
    const resolve = (p, forWrite) => {
        if (typeof p !== "string" || !path.isAbsolute(p)) refuse(p, "not an absolute path");
        const lexical = path.resolve(p);
        let real;
        try {
            if (forWrite) {
                let target = lexical;
                if (fs.existsSync(lexical) && fs.lstatSync(lexical).isSymbolicLink()) target = fs.realpathSync(lexical);
                real = path.join(fs.realpathSync(path.dirname(target)), path.basename(target));
            } else {
                real = fs.realpathSync(lexical);
            }
        } catch (err) {
            // outside or missing: do not tell which
            refuse(p, err.code || "unresolvable");
        }
        if (!within(root, real)) refuse(p, "outside the session's cwd");
        return real;
    };
    return {
        read: (params) => ({ content: fs.readFileSync(resolve(params.path, false), "utf8") }),
        write: (params) => {
            fs.writeFileSync(resolve(params.path, true), params.content);
            return {};
        },
    };
}

// A client that lets everything through, without touching the disk.
function permissiveFs() {
    const files = new Map();
    return {
        read: (params) => ({ content: files.get(params.path) ?? "whatever" }),
        write: (params) => {
            files.set(params.path, params.content);
            return {};
        },
    };
}

// ------------------------------------------------------------ checks ---
const ALL_FS = { fs: { readTextFile: true, writeTextFile: true } };
const checks = [];
const check = (name, fn) => checks.push({ name, fn });
const running = new Set();

async function withAgent(behaviour, opts, fn) {
    const a = new AgentProcess(behaviour, opts);
    running.add(a);
    try {
        return await fn(a);
    } catch (err) {
        err.message += `\n--- stderr of '${behaviour}' ---\n${a.stderr.slice(-4000)}`;
        throw err;
    } finally {
        a.kill();
        running.delete(a);
    }
}

check("usage", async () => {
    const child = spawn(process.execPath, [AGENT, "no-such-behaviour"], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const code = await deadline(new Promise((r) => child.on("exit", r)), "exit on a bad behaviour");
    assert.equal(code, 2);
    assert.equal(out, "");
    assert.match(err, /^usage: node acp_agent\.mjs BEHAVIOUR/);
});

// The exact bytes a C client sees, without the SDK on our side.
check("raw-wire", async () => {
    const cwd = freshDir("raw");
    const child = spawn(process.execPath, [AGENT, "echo"], { stdio: ["pipe", "pipe", "pipe"] });
    running.add({ kill: () => child.kill("SIGKILL") });
    let buf = "";
    let wake = () => {};
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (d) => {
        buf += d;
        wake();
    });
    const exited = new Promise((r) => child.on("exit", (code, signal) => r({ code, signal })));
    const readLine = () => deadline(new Promise((resolve) => {
        wake = () => {
            const i = buf.indexOf("\n");
            if (i >= 0) {
                const line = buf.slice(0, i);
                buf = buf.slice(i + 1);
                resolve(line);
            }
        };
        wake();
    }), "a line from the agent");
    const send = (o) => child.stdin.write(JSON.stringify(o) + "\n");
    send({ jsonrpc: "2.0", id: "init", method: "initialize", params: { protocolVersion: 1, clientCapabilities: {} } });
    assert.equal(await readLine(), '{"jsonrpc":"2.0","id":"init","result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false,"promptCapabilities":{"image":false,"audio":false,"embeddedContext":false}},"authMethods":[],"agentInfo":{"name":"parley-acp-test-agent","title":"parley test agent (echo)","version":"1.0.0"}}}');
    send({ jsonrpc: "2.0", id: 1, method: "session/new", params: { cwd, mcpServers: [] } });
    const m = /^\{"jsonrpc":"2\.0","id":1,"result":\{"sessionId":"(sess-[0-9a-f-]{36})"\}\}$/.exec(await readLine());
    assert.ok(m, "session/new response");
    const sid = m[1];
    send({ jsonrpc: "2.0", id: 2, method: "session/prompt", params: { sessionId: sid, prompt: [{ type: "text", text: "line1\nline2 \u00e9\u2603" }] } });
    assert.equal(await readLine(), `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"${sid}","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"line1\\nline2 \u00e9\u2603"}}}}`);
    assert.equal(await readLine(), '{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}');
    // an unknown method, an unknown session
    send({ jsonrpc: "2.0", id: 3, method: "session/load", params: { sessionId: sid, cwd, mcpServers: [] } });
    assert.match(await readLine(), /^\{"jsonrpc":"2\.0","id":3,"error":\{"code":-32601,/);
    send({ jsonrpc: "2.0", id: 4, method: "session/prompt", params: { sessionId: "sess-nope", prompt: [] } });
    assert.match(await readLine(), /^\{"jsonrpc":"2\.0","id":4,"error":\{"code":-32002,/);
    child.stdin.end();
    assert.deepEqual(await deadline(exited, "exit after stdin EOF"), { code: 0, signal: null });
    assert.equal(buf, "", "nothing after the last line");
});

// Exits on EOF before and after initialize (every other check ends with
// an EOF too, some of them in the middle of a turn).
check("eof", async () => {
    for (const b of ["echo", "crash-load"]) {
        await withAgent(b, {}, async (a) => {
            await a.finish(0);
        });
        await withAgent(b, {}, async (a) => {
            await a.initialize({});
            await a.finish(0);
        });
    }
});

check("echo", async () => {
    const cwd = freshDir("echo");
    await withAgent("echo", {}, async (a) => {
        await a.initialize({}, 7); // a newer version than it has: it answers 1
        const s1 = await a.newSession(cwd);
        const s2 = await a.newSession(cwd);
        assert.notEqual(s1, s2, "sessionIds are unique");
        assert.deepEqual(await a.turn(s1, "hello world"), { updates: [chunk("hello world")], stopReason: "end_turn" });
        assert.deepEqual(await a.turn(s2, "other"), { updates: [chunk("other")], stopReason: "end_turn" });
        // several blocks: the text ones, concatenated
        const from = a.messages.length;
        const res = await deadline(a.agent.request("session/prompt", {
            sessionId: s1,
            prompt: [{ type: "text", text: "a" }, { type: "resource_link", name: "f", uri: "file:///f" }, { type: "text", text: "b" }],
        }), "prompt response");
        assert.deepEqual(res, { stopReason: "end_turn" });
        assert.deepEqual(a.updatesSince(from, s1), [chunk("ab")]);
        // the SDK's ActiveSession helper works against it too
        const session = await deadline(a.agent.buildSession(cwd).start(), "buildSession().start()");
        session.prompt("via ActiveSession");
        assert.equal(await deadline(session.readText(), "readText"), "via ActiveSession");
        session.dispose();
        await assert.rejects(a.agent.request("session/prompt", { sessionId: "sess-unknown", prompt: [] }), (e) => e.code === -32002);
        await assert.rejects(a.agent.request("session/load", { sessionId: s1, cwd, mcpServers: [] }), (e) => e.code === -32601);
        await a.finish(0);
    });
});

function fullTurn(cwd, n) {
    const file = path.join(cwd, "file1.txt");
    return [
        thought("Let me look at the files."),
        thought(" Then I will fix the typo."),
        { sessionUpdate: "tool_call", toolCallId: `call-${n}-1`, title: "$ ls", kind: "execute", status: "pending", rawInput: { command: "ls" } },
        { sessionUpdate: "tool_call_update", toolCallId: `call-${n}-1`, status: "in_progress" },
        {
            sessionUpdate: "tool_call_update", toolCallId: `call-${n}-1`, status: "completed",
            content: [textContent("file1.txt\nfile2.txt")], rawOutput: { stdout: "file1.txt\nfile2.txt", exitCode: 0 },
        },
        {
            sessionUpdate: "tool_call", toolCallId: `call-${n}-2`, title: "Edit file1.txt", kind: "edit", status: "completed",
            locations: [{ path: file, line: 1 }],
            content: [{ type: "diff", path: file, oldText: "helo", newText: "hello" }],
            rawInput: { path: file, oldText: "helo", newText: "hello" },
        },
        {
            sessionUpdate: "plan", entries: [
                { content: "List the files", priority: "high", status: "completed" },
                { content: "Fix the typo in file1.txt", priority: "medium", status: "in_progress" },
            ],
        },
        chunk("I listed the files"),
        chunk(" and fixed the typo"),
        chunk(" in file1.txt."),
    ];
}

check("full", async () => {
    const cwd = freshDir("full");
    await withAgent("full", {}, async (a) => {
        await a.initialize(ALL_FS);
        const sid = await a.newSession(cwd);
        for (const n of [1, 2]) {
            const t = await a.turn(sid, `fix it ${n}`);
            assert.deepEqual(t, { updates: fullTurn(cwd, n), stopReason: "end_turn" });
            const text = t.updates.filter((u) => u.sessionUpdate === "agent_message_chunk").map((u) => u.content.text).join("");
            assert.equal(text, "I listed the files and fixed the typo in file1.txt.");
        }
        assert.deepEqual(fs.readdirSync(cwd), [], "full touches no file");
        await a.finish(0);
    });
});

check("parallel", async () => {
    const cwd = freshDir("parallel");
    await withAgent("parallel", {}, async (a) => {
        await a.initialize({});
        const sid = await a.newSession(cwd);
        for (const n of [1, 2]) {
            assert.deepEqual(await a.turn(sid, "read both"), {
                updates: [
                    { sessionUpdate: "tool_call", toolCallId: `call-${n}-a`, title: "$ cat a.txt", kind: "read", status: "in_progress", rawInput: { command: "cat a.txt" } },
                    { sessionUpdate: "tool_call", toolCallId: `call-${n}-b`, title: "$ cat b.txt", kind: "read", status: "in_progress", rawInput: { command: "cat b.txt" } },
                    { sessionUpdate: "tool_call_update", toolCallId: `call-${n}-b`, status: "completed", content: [textContent("contents of b")] },
                    { sessionUpdate: "tool_call_update", toolCallId: `call-${n}-a`, status: "completed", content: [textContent("contents of a")] },
                    chunk("both files read"),
                ],
                stopReason: "end_turn",
            });
        }
        await a.finish(0);
    });
});

check("permission", async () => {
    const cwd = freshDir("permission");
    const answers = [];
    const permission = async (params, agent) => {
        const how = answers.shift();
        if (how === "cancel") {
            // as a client pausing: cancel the turn, answer the open request cancelled
            await agent.notify("session/cancel", { sessionId: params.sessionId });
            return { outcome: { outcome: "cancelled" } };
        }
        return { outcome: { outcome: "selected", optionId: how } };
    };
    await withAgent("permission", { permission }, async (a) => {
        await a.initialize({});
        const sid = await a.newSession(cwd);
        const call = (n) => ({ toolCallId: `call-${n}-1`, title: "$ rm -rf build", kind: "execute", status: "pending", rawInput: { command: "rm -rf build" } });
        const announce = (n) => ({ sessionUpdate: "tool_call", ...call(n) });
        const cases = [
            ["allow", [
                { sessionUpdate: "tool_call_update", toolCallId: "call-1-1", status: "completed", content: [textContent("removed build/")], rawOutput: { exitCode: 0 } },
                chunk("allowed"),
            ], "end_turn"],
            ["reject", [
                { sessionUpdate: "tool_call_update", toolCallId: "call-2-1", status: "failed", content: [textContent("the user rejected this call")] },
                chunk("rejected"),
            ], "end_turn"],
            ["cancel", [], "cancelled"],
            ["maybe", [
                { sessionUpdate: "tool_call_update", toolCallId: "call-4-1", status: "failed" },
                chunk("unknown option maybe"),
            ], "end_turn"],
        ];
        let n = 0;
        for (const [how, rest, stopReason] of cases) {
            n++;
            answers.push(how);
            const asked = a.agentRequests.length;
            assert.deepEqual(await a.turn(sid, "clean up"), { updates: [announce(n), ...rest], stopReason }, `answer ${how}`);
            assert.deepEqual(a.agentRequests.slice(asked), [{
                method: "session/request_permission",
                params: {
                    sessionId: sid, toolCall: call(n),
                    options: [
                        { optionId: "allow", name: "Allow", kind: "allow_once" },
                        { optionId: "reject", name: "Reject", kind: "reject_once" },
                    ],
                },
            }]);
        }
        await a.finish(0);
    });
});

check("cancel", async () => {
    const cwd = freshDir("cancel");
    await withAgent("cancel", {}, async (a) => {
        await a.initialize({});
        const sid = await a.newSession(cwd);
        for (const n of [1, 2]) {
            const { done, from } = a.startPrompt(sid, "sleep");
            await a.waitFor(a.hasUpdate(from, sid, (u) => u.sessionUpdate === "tool_call"), "the tool_call");
            await a.agent.notify("session/cancel", { sessionId: sid });
            assert.deepEqual(await deadline(done, "the cancelled prompt's response"), { stopReason: "cancelled" });
            assert.deepEqual(a.updatesSince(from, sid), [
                { sessionUpdate: "tool_call", toolCallId: `call-${n}-1`, title: "$ sleep 1000", kind: "execute", status: "in_progress", rawInput: { command: "sleep 1000" } },
                { sessionUpdate: "tool_call_update", toolCallId: `call-${n}-1`, status: "failed", content: [textContent("cancelled")] },
            ]);
        }
        // a cancel with no prompt running is ignored
        await a.agent.notify("session/cancel", { sessionId: sid });
        // EOF while a turn waits for its cancel
        const { from } = a.startPrompt(sid, "sleep");
        await a.waitFor(a.hasUpdate(from, sid, (u) => u.sessionUpdate === "tool_call"), "the third tool_call");
        await a.finish(0);
    });
});

check("crash", async () => {
    const cwd = freshDir("crash");
    await withAgent("crash", {}, async (a) => {
        await a.initialize({});
        const sid = await a.newSession(cwd);
        const { done, from } = a.startPrompt(sid, "do it");
        await assert.rejects(deadline(done, "the crashing prompt to fail"));
        assert.deepEqual(await deadline(a.exited, "the crash"), { code: 3, signal: null });
        assert.deepEqual(a.updatesSince(from, sid), [
            { sessionUpdate: "tool_call", toolCallId: "call-1-1", title: "$ crash", kind: "execute", status: "pending", rawInput: { command: "crash" } },
        ]);
        assert.ok(fs.existsSync(path.join(cwd, ".acp-agent-crashed")), "the crash marker");
        assert.ok(!a.messages.some((m) => "id" in m && "result" in m && m.result?.stopReason), "no prompt response");
    });
    await withAgent("crash", {}, async (a) => {
        await a.initialize({});
        const sid = await a.newSession(cwd);
        assert.deepEqual(await a.turn(sid, "again"), { updates: [chunk("again")], stopReason: "end_turn" });
        assert.deepEqual(await a.turn(sid, "more"), { updates: [chunk("more")], stopReason: "end_turn" });
        await a.finish(0);
    });
});

check("crash-load", async () => {
    const cwd = freshDir("crash-load");
    const crashed = { sessionUpdate: "tool_call", toolCallId: "call-1-1", title: "$ crash", kind: "execute", status: "pending", rawInput: { command: "crash" } };
    let sid;
    await withAgent("crash-load", {}, async (a) => {
        await a.initialize({});
        sid = await a.newSession(cwd);
        const { done } = a.startPrompt(sid, "do it");
        await assert.rejects(deadline(done, "the crashing prompt to fail"));
        assert.deepEqual(await deadline(a.exited, "the crash"), { code: 3, signal: null });
    });
    const load = async (a, want) => {
        const from = a.messages.length;
        const parsedFrom = a.parsedUpdates.length;
        const res = await deadline(a.agent.request("session/load", { sessionId: sid, cwd, mcpServers: [] }), "session/load response");
        assert.deepEqual(res, {});
        // all replayed before the response
        const replayed = a.updatesSince(from, sid);
        assert.deepEqual(replayed, want, "replayed history");
        a.checkParsed(parsedFrom, replayed);
    };
    await withAgent("crash-load", {}, async (a) => {
        await a.initialize({});
        await load(a, [user("do it"), crashed]);
        assert.deepEqual(await a.turn(sid, "hi"), { updates: [chunk("hi")], stopReason: "end_turn" });
        await assert.rejects(a.agent.request("session/load", { sessionId: "sess-unknown", cwd, mcpServers: [] }), (e) => e.code === -32002);
        await assert.rejects(a.agent.request("session/load", { sessionId: "../x", cwd, mcpServers: [] }), (e) => e.code === -32002);
        await a.finish(0);
    });
    await withAgent("crash-load", {}, async (a) => {
        await a.initialize({});
        await load(a, [user("do it"), crashed, user("hi"), chunk("hi")]);
        // a new session in the same cwd does not crash again
        const s2 = await a.newSession(cwd);
        assert.deepEqual(await a.turn(s2, "fresh"), { updates: [chunk("fresh")], stopReason: "end_turn" });
        await a.finish(0);
    });
});

check("interleave", async () => {
    const cwd = freshDir("interleave");
    await withAgent("interleave", {}, async (a) => {
        await a.initialize({});
        const sid = await a.newSession(cwd);
        assert.deepEqual(await a.turn(sid, "build"), {
            updates: [
                { sessionUpdate: "tool_call", toolCallId: "call-1-1", title: "$ make", kind: "execute", status: "pending", rawInput: { command: "make" } },
                chunk("while pending"),
                { sessionUpdate: "tool_call_update", toolCallId: "call-1-1", status: "completed", content: [textContent("built")] },
            ],
            stopReason: "end_turn",
        });
        await a.finish(0);
    });
});

check("unknown-result", async () => {
    const cwd = freshDir("unknown-result");
    await withAgent("unknown-result", {}, async (a) => {
        await a.initialize({});
        const sid = await a.newSession(cwd);
        assert.deepEqual(await a.turn(sid, "go"), {
            updates: [
                { sessionUpdate: "tool_call_update", toolCallId: "never-announced", status: "completed", content: [textContent("orphan output")] },
                chunk("done"),
            ],
            stopReason: "end_turn",
        });
        await a.finish(0);
    });
});

function floodNumbers(updates) {
    return updates.map((u) => {
        assert.equal(u.sessionUpdate, "agent_message_chunk");
        const m = /^flood (\d+)\n$/.exec(u.content.text);
        assert.ok(m, `a flood chunk: ${JSON.stringify(u.content.text)}`);
        return Number(m[1]);
    });
}

check("flood", async () => {
    const cwd = freshDir("flood");
    await withAgent("flood", {}, async (a) => {
        await a.initialize({});
        const sid = await a.newSession(cwd);
        const { done, from } = a.startPrompt(sid, "go");
        await a.waitFor(() => a.updatesSince(from, sid).length >= 2000, "2000 flood chunks");
        await a.agent.notify("session/cancel", { sessionId: sid });
        assert.deepEqual(await deadline(done, "the flood's cancelled response"), { stopReason: "cancelled" });
        const nums = floodNumbers(a.updatesSince(from, sid));
        assert.deepEqual(nums, nums.map((_, i) => i + 1), "flood chunks numbered 1, 2, ...");
        // again, and this time stdin closes mid-flood
        const again = a.startPrompt(sid, "go");
        await a.waitFor(() => a.updatesSince(again.from, sid).length >= 100, "100 more flood chunks");
        await a.finish(0);
    });
});

check("flood-deaf", async () => {
    const cwd = freshDir("flood-deaf");
    await withAgent("flood-deaf", {}, async (a) => {
        await a.initialize({});
        const sid = await a.newSession(cwd);
        const { done, from } = a.startPrompt(sid, "go");
        await a.waitFor(() => a.updatesSince(from, sid).length >= 500, "500 flood chunks");
        await a.agent.notify("session/cancel", { sessionId: sid });
        const after = a.messages.length;
        await a.waitFor(() => a.updatesSince(after, sid).length >= 2000, "2000 flood chunks after the cancel");
        assert.ok(!a.messages.some((m) => m.id !== undefined && "result" in m && m.result?.stopReason), "the turn never ends");
        void done;
        await a.finish(0);
    });
});

check("bigline", async () => {
    const cwd = freshDir("bigline");
    await withAgent("bigline", {}, async (a) => {
        await a.initialize({});
        const sid = await a.newSession(cwd);
        const { done, from } = a.startPrompt(sid, "go");
        const big = await a.waitFor(a.hasUpdate(from, sid, () => true), "the big update");
        assert.equal(big.sessionUpdate, "agent_message_chunk");
        assert.equal(big.content.type, "text");
        assert.equal(big.content.text.length, BIG);
        assert.ok(/^x+$/.test(big.content.text), "the text is all x");
        const line = a.rawLines.find((l) => l.length > BIG);
        assert.equal(Buffer.byteLength(line), BIG + 154 + sid.length);
        assert.ok(line.startsWith(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"${sid}","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"xxx`));
        assert.ok(line.endsWith('xxx"}}}}'));
        await a.waitFor(() => a.parsedUpdates.length === 1, "the SDK to accept the big update");
        await a.agent.notify("session/cancel", { sessionId: sid });
        assert.deepEqual(await deadline(done, "the cancelled response"), { stopReason: "cancelled" });
        assert.equal(a.updatesSince(from, sid).length, 1);
        await a.finish(0);
    });
});

check("badjson", async () => {
    const cwd = freshDir("badjson");
    await withAgent("badjson", {}, async (a) => {
        await a.initialize({});
        const sid = await a.newSession(cwd);
        const { done, from } = a.startPrompt(sid, "go");
        const at = a.rawLines.length;
        await a.waitFor(() => a.rawLines.slice(at).includes("this is not json"), "the line that is not JSON");
        await a.agent.notify("session/cancel", { sessionId: sid });
        assert.deepEqual(await deadline(done, "the cancelled response"), { stopReason: "cancelled" });
        assert.deepEqual(a.updatesSince(from, sid), []);
        await a.finish(0);
    });
});

check("badrpc", async () => {
    const cwd = freshDir("badrpc");
    await withAgent("badrpc", {}, async (a) => {
        await a.initialize({});
        const sid = await a.newSession(cwd);
        const { done, from } = a.startPrompt(sid, "go");
        const at = a.rawLines.length;
        const want = ['{"jsonrpc":"2.0","id":99999,"result":{}}', '{"hello":1}'];
        await a.waitFor(() => {
            const lines = a.rawLines.slice(at);
            const i = lines.indexOf(want[0]);
            return i >= 0 && lines[i + 1] === want[1];
        }, "the two bad JSON-RPC lines");
        await a.agent.notify("session/cancel", { sessionId: sid });
        assert.deepEqual(await deadline(done, "the cancelled response"), { stopReason: "cancelled" });
        assert.deepEqual(a.updatesSince(from, sid), []);
        await a.finish(0);
    });
});

async function fsTurn(caps, fsImpl, name) {
    const parent = freshDir(name);
    const cwd = path.join(parent, "ws");
    fs.mkdirSync(cwd);
    return withAgent("fs", { fs: fsImpl ? fsImpl(cwd) : undefined }, async (a) => {
        await a.initialize(caps);
        const sid = await a.newSession(cwd);
        const t = await a.turn(sid, "try the files");
        assert.equal(t.stopReason, "end_turn");
        assert.equal(t.updates.length, 1);
        assert.equal(fs.readlinkSync(path.join(cwd, "link")), "/etc", "the agent's symlink");
        const requests = a.agentRequests.map((r) => [r.method, r.params.path]);
        await a.finish(0);
        return { text: t.updates[0].content.text, parent, cwd, requests };
    });
}

check("fs-confined", async () => {
    const r = await fsTurn(ALL_FS, confiningFs, "fs-confined");
    assert.equal(r.text, "read-outside:refused write-outside:refused symlink:refused inside:ok");
    assert.equal(fs.readFileSync(path.join(r.cwd, "inside.txt"), "utf8"), "hello");
    assert.ok(!fs.existsSync(path.join(r.parent, "escape.txt")), "nothing escaped");
    assert.deepEqual(r.requests, [
        ["fs/read_text_file", "/etc/hostname"],
        ["fs/write_text_file", `${r.cwd}/../escape.txt`],
        ["fs/read_text_file", `${r.cwd}/link/hostname`],
        ["fs/write_text_file", `${r.cwd}/inside.txt`],
        ["fs/read_text_file", `${r.cwd}/inside.txt`],
    ]);
});

check("fs-permissive", async () => {
    const r = await fsTurn(ALL_FS, permissiveFs, "fs-permissive");
    assert.equal(r.text, "read-outside:ok write-outside:ok symlink:ok inside:ok");
});

check("fs-no-capabilities", async () => {
    const r = await fsTurn({}, null, "fs-none");
    assert.equal(r.text, "read-outside:skipped write-outside:skipped symlink:skipped inside:skipped");
    assert.deepEqual(r.requests, [], "no fs request without the capabilities");
});

check("fs-read-only", async () => {
    const r = await fsTurn({ fs: { readTextFile: true } }, confiningFs, "fs-read-only");
    assert.equal(r.text, "read-outside:refused write-outside:skipped symlink:refused inside:skipped");
    assert.deepEqual(r.requests.map((x) => x[0]), ["fs/read_text_file", "fs/read_text_file"]);
});

check("fs-invalid-answers", async () => {
    const r = await fsTurn(ALL_FS, () => ({ read: () => ({ contents: "x" }), write: () => ({}) }), "fs-invalid");
    assert.equal(r.text, "read-outside:invalid write-outside:ok symlink:invalid inside:invalid");
});

check("permission-malformed", async () => {
    const cwd = freshDir("permission-malformed");
    const permission = async () => ({ outcome: "selected", optionId: "allow" }); // flat: not ACP
    await withAgent("permission", { permission }, async (a) => {
        await a.initialize({});
        const sid = await a.newSession(cwd);
        await assert.rejects(a.agent.request("session/prompt", { sessionId: sid, prompt: [{ type: "text", text: "x" }] }),
            (e) => e.code === -32603 && /session\/request_permission response/.test(JSON.stringify(e.data)));
        await a.finish(0);
    });
});

check("secrets", async () => {
    const cwd = freshDir("secrets");
    const v = "s3cr3t-Value/with \"quotes\"";
    const want = (n, v) => [
        thought(`I will print ${v}`),
        { sessionUpdate: "tool_call", toolCallId: `call-${n}-1`, title: `echo ${v}`, kind: "execute", status: "pending", rawInput: { command: `echo ${v}` } },
        { sessionUpdate: "tool_call_update", toolCallId: `call-${n}-1`, status: "completed", content: [textContent(v)], rawOutput: { stdout: v } },
        chunk(`the value is ${v}`),
    ];
    const env = { ACP_SELFCHECK_SECRET: v };
    delete process.env.ACP_SELFCHECK_UNSET;
    await withAgent("secrets", { env }, async (a) => {
        await a.initialize({});
        const sid = await a.newSession(cwd);
        assert.deepEqual(await a.turn(sid, "ACP_SELFCHECK_SECRET\n"), { updates: want(1, v), stopReason: "end_turn" });
        assert.deepEqual(await a.turn(sid, "ACP_SELFCHECK_UNSET"), { updates: want(2, ""), stopReason: "end_turn" });
        await a.finish(0);
    });
});

for (const r of ["refusal", "max_tokens", "max_turn_requests", "end_turn", "cancelled"]) {
    check(`stop-${r}`, async () => {
        const cwd = freshDir(`stop-${r}`);
        await withAgent(`stop-${r}`, {}, async (a) => {
            await a.initialize({});
            const sid = await a.newSession(cwd);
            assert.deepEqual(await a.turn(sid, "go"), { updates: [chunk(`stopping: ${r}`)], stopReason: r });
            await a.finish(0);
        });
    });
}

check("slow", async () => {
    const cwd = freshDir("slow");
    const release = path.join(cwd, "acp-agent-release");
    await withAgent("slow", {}, async (a) => {
        await a.initialize({});
        const sid = await a.newSession(cwd);
        const first = a.startPrompt(sid, "wait for me");
        await a.waitFor(a.hasUpdate(first.from, sid, () => true), "the slow turn's chunk");
        fs.writeFileSync(release, "");
        assert.deepEqual(await deadline(first.done, "the released response"), { stopReason: "end_turn" });
        assert.deepEqual(a.updatesSince(first.from, sid), [chunk("wait for me")]);
        assert.ok(!fs.existsSync(release), "the release file is consumed");
        const second = a.startPrompt(sid, "then cancel");
        await a.waitFor(a.hasUpdate(second.from, sid, () => true), "the second turn's chunk");
        await a.agent.notify("session/cancel", { sessionId: sid });
        assert.deepEqual(await deadline(second.done, "the cancelled response"), { stopReason: "cancelled" });
        // a release file there before the turn starts ends it at once
        fs.writeFileSync(release, "");
        assert.deepEqual(await a.turn(sid, "quick"), { updates: [chunk("quick")], stopReason: "end_turn" });
        await a.finish(0);
    });
});

// ------------------------------------------------------------- main ---
const only = process.argv.slice(2);
const selected = checks.filter((c) => only.length === 0 || only.some((o) => c.name.startsWith(o)));
if (selected.length === 0) {
    console.error(`no check matches ${only.join(" ")}; checks: ${checks.map((c) => c.name).join(" ")}`);
    process.exit(2);
}
let failed = false;
for (const c of selected) {
    const t0 = Date.now();
    try {
        await c.fn();
        console.log(`ok ${c.name} (${Date.now() - t0} ms)`);
    } catch (err) {
        console.log(`FAIL ${c.name}: ${err.stack || err}`);
        failed = true;
        break;
    }
}
for (const a of running) a.kill();
fs.rmSync(TMP, { recursive: true, force: true });
if (!failed) console.log(`passed ${selected.length} checks`);
process.exit(failed ? 1 : 0);
