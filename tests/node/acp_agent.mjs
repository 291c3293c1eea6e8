#!/usr/bin/env node
// acp_agent.mjs - a scripted ACP (Agent Client Protocol v1) agent for
// parley's integration tests, built on the official SDK
// (@agentclientprotocol/sdk 2.4.0), so parley's client side is tested
// against the protocol's own implementation.
//
//   node tests/node/acp_agent.mjs BEHAVIOUR
//
// stdin/stdout carry newline-delimited JSON-RPC only; logs go to stderr. The
// agent exits 0 as soon as stdin reaches EOF (whatever is in flight), and 0
// if stdout is closed under it (EPIPE). An unknown or missing BEHAVIOUR is a
// usage error: a line on stderr and exit status 2.
//
// Common to every behaviour
// -------------------------
// initialize   -> {"protocolVersion":1,
//                  "agentCapabilities":{"loadSession":L,"promptCapabilities":
//                    {"image":false,"audio":false,"embeddedContext":false}},
//                  "authMethods":[],
//                  "agentInfo":{"name":"parley-acp-test-agent",
//                    "title":"parley test agent (BEHAVIOUR)","version":"1.0.0"}}
//                L is true for crash-load only, false otherwise. The answer is
//                1 whatever protocolVersion the client sent. The client's
//                clientCapabilities are kept (the fs behaviour reads them).
//                NB (SDK): any other request before the initialize response
//                has been sent gets -32600; wait for it before session/new.
// session/new  -> {"sessionId":"sess-<uuid v4>"}, unique per call. The cwd is
//                kept for the session. mcpServers is accepted and ignored.
// session/load -> -32601 (method not found), except for crash-load.
// session/prompt for an unknown sessionId -> error -32002; while a prompt is
//                still running in the same session -> error -32600.
// session/cancel while a prompt runs marks that turn cancelled (what that does
//                is per behaviour below); with no prompt running it is ignored.
//
// Every session/update below is checked against the ACP v1 schema before it
// is sent (strictly: an unknown key, or a value the SDK's lenient parser
// would drop or replace, is a bug and fails the request with -32603).
// Files the agent makes in a session's cwd: .acp-agent-crashed (crash,
// crash-load), .acp-agent-sessions/ (crash-load), link and inside.txt (fs);
// slow consumes acp-agent-release. Nothing outside cwd. The prompt text is the
// concatenation of the prompt's "text" blocks (other block types ignored). N
// is the turn number: 1 for the session's first session/prompt, then 2, 3...
// "chunk T" below is {"sessionUpdate":"agent_message_chunk",
// "content":{"type":"text","text":T}}, "thought T" the same with
// "agent_thought_chunk", and "text T" in a content list is
// {"type":"content","content":{"type":"text","text":T}}.
//
// Behaviours (the updates of one turn, in order, then the stopReason)
// ----------
// echo        chunk <prompt text>; end_turn.
// full        thought "Let me look at the files."; thought " Then I will fix
//             the typo.";
//             tool_call {toolCallId:"call-N-1", title:"$ ls", kind:"execute",
//               status:"pending", rawInput:{command:"ls"}};
//             tool_call_update {toolCallId:"call-N-1", status:"in_progress"};
//             tool_call_update {toolCallId:"call-N-1", status:"completed",
//               content:[text "file1.txt\nfile2.txt"],
//               rawOutput:{stdout:"file1.txt\nfile2.txt", exitCode:0}};
//             tool_call {toolCallId:"call-N-2", title:"Edit file1.txt",
//               kind:"edit", status:"completed",
//               locations:[{path:"<cwd>/file1.txt", line:1}],
//               content:[{type:"diff", path:"<cwd>/file1.txt", oldText:"helo",
//                 newText:"hello"}],
//               rawInput:{path:"<cwd>/file1.txt", oldText:"helo",
//                 newText:"hello"}};
//             plan {entries:[
//               {content:"List the files", priority:"high", status:"completed"},
//               {content:"Fix the typo in file1.txt", priority:"medium",
//                status:"in_progress"}]};
//             chunk "I listed the files"; chunk " and fixed the typo";
//             chunk " in file1.txt." (joined: "I listed the files and fixed
//             the typo in file1.txt."); end_turn.
//             <cwd> is the session's cwd as session/new gave it. No file is
//             touched.
// parallel    tool_call {toolCallId:"call-N-a", title:"$ cat a.txt",
//               kind:"read", status:"in_progress", rawInput:{command:"cat a.txt"}};
//             tool_call {toolCallId:"call-N-b", title:"$ cat b.txt",
//               kind:"read", status:"in_progress", rawInput:{command:"cat b.txt"}};
//             tool_call_update {toolCallId:"call-N-b", status:"completed",
//               content:[text "contents of b"]};
//             tool_call_update {toolCallId:"call-N-a", status:"completed",
//               content:[text "contents of a"]};
//             chunk "both files read"; end_turn.
// permission  tool_call {toolCallId:"call-N-1", title:"$ rm -rf build",
//               kind:"execute", status:"pending", rawInput:{command:"rm -rf build"}};
//             then the request session/request_permission {sessionId,
//               toolCall:{toolCallId:"call-N-1", title:"$ rm -rf build",
//                 kind:"execute", status:"pending", rawInput:{command:"rm -rf build"}},
//               options:[{optionId:"allow", name:"Allow", kind:"allow_once"},
//                        {optionId:"reject", name:"Reject", kind:"reject_once"}]}.
//             selected "allow": tool_call_update {toolCallId:"call-N-1",
//               status:"completed", content:[text "removed build/"],
//               rawOutput:{exitCode:0}}; chunk "allowed"; end_turn.
//             selected "reject": tool_call_update {toolCallId:"call-N-1",
//               status:"failed", content:[text "the user rejected this call"]};
//               chunk "rejected"; end_turn.
//             selected anything else X: tool_call_update failed (no content);
//               chunk "unknown option X"; end_turn.
//             outcome "cancelled", or a session/cancel seen before the answer
//               came: no further update; stopReason "cancelled".
//             An error response to the permission request, or an answer
//               that does not match the schema, fails the prompt with -32603.
// cancel      tool_call {toolCallId:"call-N-1", title:"$ sleep 1000",
//               kind:"execute", status:"in_progress", rawInput:{command:"sleep 1000"}};
//             then waits (no timer) for session/cancel; then
//             tool_call_update {toolCallId:"call-N-1", status:"failed",
//               content:[text "cancelled"]}; stopReason "cancelled".
// crash       If <cwd>/.acp-agent-crashed does not exist (first prompt ever
//             in that cwd): creates it, sends tool_call {toolCallId:"call-N-1",
//             title:"$ crash", kind:"execute", status:"pending",
//             rawInput:{command:"crash"}}, and exits with status 3 without
//             answering the prompt. Otherwise as echo.
// crash-load  As crash, but advertises loadSession:true and keeps each
//             session's history in <cwd>/.acp-agent-sessions/<sessionId>.jsonl
//             (one SessionUpdate per line): for every prompt a
//             user_message_chunk {content:{type:"text", text:<prompt text>}}
//             (recorded, never sent live), then every update it sends.
//             session/load {sessionId, cwd} with such a file under that cwd
//             replays it line by line as session/update notifications, then
//             answers {}; turn numbers continue (N = prompts in the history
//             + 1). Unknown sessionId -> error -32002 (RequestError.
//             sessionNotFound). So after a crash on "P", a load replays
//             [user_message_chunk "P", tool_call call-1-1 pending], and the
//             next prompt "Q" (turn 2) sends chunk "Q"; a later load replays
//             [user "P", tool_call call-1-1, user "Q", chunk "Q"].
// interleave  (breaks the tool-call rules) tool_call {toolCallId:"call-N-1",
//               title:"$ make", kind:"execute", status:"pending",
//               rawInput:{command:"make"}};
//             chunk "while pending";
//             tool_call_update {toolCallId:"call-N-1", status:"completed",
//               content:[text "built"]}; end_turn.
// loop-error  (a stuck agent) repeats the same failing call: in turn 1
//             exactly 3 times, then end_turn; in later turns up to 50 times
//             or until a session/cancel (then cancelled; end_turn after the
//             50th). Each time: tool_call {toolCallId:"call-N-I" (I from 1),
//               title:"$ cat missing.txt", kind:"execute", status:"pending",
//               rawInput:{command:"cat missing.txt"}};
//             tool_call_update {toolCallId:"call-N-I", status:"failed",
//               content:[text "cat: missing.txt: No such file or directory"]}.
// unknown-result  tool_call_update {toolCallId:"never-announced",
//               status:"completed", content:[text "orphan output"]}
//             (never announced by a tool_call); chunk "done"; end_turn.
// flood       chunk "flood 1\n", chunk "flood 2\n", ... as fast as stdout
//             takes them: each write is awaited, so while the client does
//             not read, the agent holds one message and waits (still reading
//             stdin). Never ends the turn by itself; on session/cancel it
//             stops and answers "cancelled". Otherwise it stops only by stdin
//             EOF (exit 0), EPIPE (exit 0) or a signal.
// flood-deaf  As flood, but ignores session/cancel: the turn never ends.
// bigline     Writes raw to stdout (bypassing the SDK) one session/update
//             line: {"jsonrpc":"2.0","method":"session/update","params":
//             {"sessionId":S,"update":{"sessionUpdate":"agent_message_chunk",
//             "content":{"type":"text","text":<17 MiB of "x">}}}} - the text
//             is exactly 17825792 bytes, the line 17825792 + 154 + len(S)
//             bytes plus "\n" (S is "sess-" and 36 more: 17825987 + "\n").
//             Then waits; session/cancel -> "cancelled".
// badjson     Writes raw the line `this is not json`, then waits;
//             session/cancel -> "cancelled".
// badrpc      Writes raw the lines {"jsonrpc":"2.0","id":99999,"result":{}}
//             (a response to nothing) and {"hello":1} (no jsonrpc), then
//             waits; session/cancel -> "cancelled".
// fs          Uses only what the client's initialize declared
//             (clientCapabilities.fs.readTextFile / writeTextFile), then
//             sends one chunk and end_turn:
//             "read-outside:R write-outside:W symlink:S inside:I" where
//             R: fs/read_text_file {path:"/etc/hostname"};
//             W: fs/write_text_file {path:"<cwd>/../escape.txt",
//                content:"escaped"} (the path is sent as written, with "..");
//             S: the agent itself replaces <cwd>/link with a symlink to /etc
//                (and leaves it there), then fs/read_text_file
//                {path:"<cwd>/link/hostname"};
//             I: fs/write_text_file {path:"<cwd>/inside.txt", content:"hello"},
//                then fs/read_text_file of it.
//             Each is "ok" (success; for I: the read gave back "hello"),
//             "refused" (an error response), "invalid" (a result that does
//             not match the schema, e.g. no "content" string), "skipped"
//             (capability not declared: R and S need read, W write, I both),
//             or for I "mismatch" (both succeeded, other content read back). A
//             fully confining client gives
//             "read-outside:refused write-outside:refused symlink:refused inside:ok".
// fs-burst    Writes <cwd>/burst.txt ("x") with fs/write_text_file, then
//             sends 12 fs/read_text_file requests for it at once, without
//             awaiting any; chunk "read:A refused:B" (A answered with the
//             content, B refused with an error response); end_turn.
// secrets     The prompt text (trimmed) names an environment variable; V is
//             its value ("" when unset). thought "I will print V";
//             tool_call {toolCallId:"call-N-1", title:"echo V",
//               kind:"execute", status:"pending", rawInput:{command:"echo V"}};
//             tool_call_update {toolCallId:"call-N-1", status:"completed",
//               content:[text V], rawOutput:{stdout:V}};
//             chunk "the value is V"; end_turn.
// stop-R      R one of refusal, max_tokens, max_turn_requests, end_turn,
//             cancelled: chunk "stopping: R"; stopReason R.
// slow        chunk <prompt text>; then holds the turn open until a file
//             named acp-agent-release appears in the session's cwd (watched
//             with fs.watch, no polling) - it deletes the file and answers
//             end_turn - or until session/cancel -> "cancelled".

import * as acp from "@agentclientprotocol/sdk";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { Readable, Writable } from "node:stream";

const STOP_REASONS = ["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"];
const BEHAVIOURS = [
    "echo", "full", "parallel", "permission", "cancel", "crash", "crash-load",
    "interleave", "loop-error", "unknown-result", "flood", "flood-deaf", "bigline", "badjson",
    "badrpc", "fs", "fs-burst", "secrets", "slow", ...STOP_REASONS.map((r) => `stop-${r}`),
];
const BIGLINE_TEXT_BYTES = 17 * 1024 * 1024;
const CRASH_MARKER = ".acp-agent-crashed";
const HISTORY_DIR = ".acp-agent-sessions";
const RELEASE_FILE = "acp-agent-release";

const behaviour = process.argv[2];
if (!BEHAVIOURS.includes(behaviour)) {
    process.stderr.write(`usage: node acp_agent.mjs BEHAVIOUR\n  BEHAVIOUR: ${BEHAVIOURS.join(" ")}\n`);
    process.exit(2);
}
// stdout is the protocol's: nothing else may print there
console.log = console.error;
console.info = console.error;
const log = (...args) => console.error(`acp_agent[${behaviour} ${process.pid}]:`, ...args);

// The SDK parses what it receives with zod schemas that are lenient on purpose
// (a bad enum value becomes undefined, a bad list becomes [], unknown keys are
// dropped) and does not check what it sends. Our messages must be exactly
// right, so each is parsed with the same schemas and everything sent must come
// out unchanged (the parser may only add defaults).
const zod = await import(new URL("../schema/zod.gen.js", import.meta.resolve("@agentclientprotocol/sdk")));

// The first place where SENT is not found unchanged in READ, or null.
function lost(sent, read, where = "") {
    if (Array.isArray(sent)) {
        if (!Array.isArray(read) || read.length !== sent.length) return where || "/";
        for (let i = 0; i < sent.length; i++) {
            const w = lost(sent[i], read[i], `${where}/${i}`);
            if (w) return w;
        }
        return null;
    }
    if (sent && typeof sent === "object") {
        if (!read || typeof read !== "object" || Array.isArray(read)) return where || "/";
        for (const k of Object.keys(sent)) {
            const w = lost(sent[k], read[k], `${where}/${k}`);
            if (w) return w;
        }
        return null;
    }
    return sent === read ? null : where || "/";
}

function strict(schema, value, what) {
    const sent = JSON.parse(JSON.stringify(value));
    let read;
    try {
        read = schema.parse(sent);
    } catch (err) {
        throw new Error(`${what} does not match the ACP schema: ${err.message}`);
    }
    const w = lost(sent, read);
    if (w) {
        const shown = JSON.stringify(sent).slice(0, 500);
        throw new Error(`${what} is not strictly valid ACP: the schema does not keep ${w} of ${shown}`);
    }
}

// ------------------------------------------------------------ state ---
let clientCapabilities = {};
const sessions = new Map(); // sessionId -> session

function newSessionState(id, cwd, history, turn = 0) {
    return { id, cwd, history, turn, running: false, cancelled: false, cancelWaiters: [] };
}

function waitCancel(s) {
    if (s.cancelled) return Promise.resolve();
    return new Promise((resolve) => s.cancelWaiters.push(resolve));
}

async function send(s, client, update) {
    const params = { sessionId: s.id, update };
    strict(zod.zSessionNotification, params, `session/update ${update.sessionUpdate}`);
    if (s.history) fs.appendFileSync(s.history, JSON.stringify(update) + "\n");
    await client.notify("session/update", params);
}

const chunk = (text) => ({ sessionUpdate: "agent_message_chunk", content: { type: "text", text } });
const thought = (text) => ({ sessionUpdate: "agent_thought_chunk", content: { type: "text", text } });
const textContent = (text) => ({ type: "content", content: { type: "text", text } });

function rawWrite(line) {
    return new Promise((resolve, reject) => {
        process.stdout.write(line, (err) => (err ? reject(err) : resolve()));
    });
}

function historyPath(cwd, sessionId) {
    return path.join(cwd, HISTORY_DIR, `${sessionId}.jsonl`);
}

// ------------------------------------------------------- behaviours ---
async function echo(s, client, text) {
    await send(s, client, chunk(text));
    return "end_turn";
}

async function crash(s, client, text) {
    const marker = path.join(s.cwd, CRASH_MARKER);
    if (fs.existsSync(marker)) return echo(s, client, text);
    fs.writeFileSync(marker, `${s.id} ${process.pid}\n`);
    await send(s, client, {
        sessionUpdate: "tool_call", toolCallId: `call-${s.turn}-1`, title: "$ crash",
        kind: "execute", status: "pending", rawInput: { command: "crash" },
    });
    log("crashing on purpose (exit 3)");
    process.exit(3);
}

async function waitThenCancelled(s) {
    await waitCancel(s);
    return "cancelled";
}

const run = {
    echo,
    crash,
    "crash-load": crash,

    async full(s, client) {
        const id1 = `call-${s.turn}-1`;
        const file = path.join(s.cwd, "file1.txt");
        await send(s, client, thought("Let me look at the files."));
        await send(s, client, thought(" Then I will fix the typo."));
        await send(s, client, {
            sessionUpdate: "tool_call", toolCallId: id1, title: "$ ls", kind: "execute",
            status: "pending", rawInput: { command: "ls" },
        });
        await send(s, client, { sessionUpdate: "tool_call_update", toolCallId: id1, status: "in_progress" });
        await send(s, client, {
            sessionUpdate: "tool_call_update", toolCallId: id1, status: "completed",
            content: [textContent("file1.txt\nfile2.txt")],
            rawOutput: { stdout: "file1.txt\nfile2.txt", exitCode: 0 },
        });
        await send(s, client, {
            sessionUpdate: "tool_call", toolCallId: `call-${s.turn}-2`, title: "Edit file1.txt",
            kind: "edit", status: "completed", locations: [{ path: file, line: 1 }],
            content: [{ type: "diff", path: file, oldText: "helo", newText: "hello" }],
            rawInput: { path: file, oldText: "helo", newText: "hello" },
        });
        await send(s, client, {
            sessionUpdate: "plan", entries: [
                { content: "List the files", priority: "high", status: "completed" },
                { content: "Fix the typo in file1.txt", priority: "medium", status: "in_progress" },
            ],
        });
        await send(s, client, chunk("I listed the files"));
        await send(s, client, chunk(" and fixed the typo"));
        await send(s, client, chunk(" in file1.txt."));
        return "end_turn";
    },

    async parallel(s, client) {
        const a = `call-${s.turn}-a`;
        const b = `call-${s.turn}-b`;
        for (const [id, f] of [[a, "a.txt"], [b, "b.txt"]]) {
            await send(s, client, {
                sessionUpdate: "tool_call", toolCallId: id, title: `$ cat ${f}`, kind: "read",
                status: "in_progress", rawInput: { command: `cat ${f}` },
            });
        }
        await send(s, client, {
            sessionUpdate: "tool_call_update", toolCallId: b, status: "completed",
            content: [textContent("contents of b")],
        });
        await send(s, client, {
            sessionUpdate: "tool_call_update", toolCallId: a, status: "completed",
            content: [textContent("contents of a")],
        });
        await send(s, client, chunk("both files read"));
        return "end_turn";
    },

    async permission(s, client) {
        const call = {
            toolCallId: `call-${s.turn}-1`, title: "$ rm -rf build", kind: "execute",
            status: "pending", rawInput: { command: "rm -rf build" },
        };
        await send(s, client, { sessionUpdate: "tool_call", ...call });
        const req = {
            sessionId: s.id, toolCall: call,
            options: [
                { optionId: "allow", name: "Allow", kind: "allow_once" },
                { optionId: "reject", name: "Reject", kind: "reject_once" },
            ],
        };
        strict(zod.zRequestPermissionRequest, req, "session/request_permission");
        const res = await client.request("session/request_permission", req);
        log("permission answer", JSON.stringify(res));
        strict(zod.zRequestPermissionResponse, res, "the client's session/request_permission response");
        const outcome = res?.outcome;
        if (s.cancelled || !outcome || outcome.outcome === "cancelled") return "cancelled";
        const id = call.toolCallId;
        if (outcome.optionId === "allow") {
            await send(s, client, {
                sessionUpdate: "tool_call_update", toolCallId: id, status: "completed",
                content: [textContent("removed build/")], rawOutput: { exitCode: 0 },
            });
            await send(s, client, chunk("allowed"));
        } else if (outcome.optionId === "reject") {
            await send(s, client, {
                sessionUpdate: "tool_call_update", toolCallId: id, status: "failed",
                content: [textContent("the user rejected this call")],
            });
            await send(s, client, chunk("rejected"));
        } else {
            await send(s, client, { sessionUpdate: "tool_call_update", toolCallId: id, status: "failed" });
            await send(s, client, chunk(`unknown option ${outcome.optionId}`));
        }
        return "end_turn";
    },

    async cancel(s, client) {
        const id = `call-${s.turn}-1`;
        await send(s, client, {
            sessionUpdate: "tool_call", toolCallId: id, title: "$ sleep 1000", kind: "execute",
            status: "in_progress", rawInput: { command: "sleep 1000" },
        });
        await waitCancel(s);
        await send(s, client, {
            sessionUpdate: "tool_call_update", toolCallId: id, status: "failed",
            content: [textContent("cancelled")],
        });
        return "cancelled";
    },

    async interleave(s, client) {
        const id = `call-${s.turn}-1`;
        await send(s, client, {
            sessionUpdate: "tool_call", toolCallId: id, title: "$ make", kind: "execute",
            status: "pending", rawInput: { command: "make" },
        });
        await send(s, client, chunk("while pending"));
        await send(s, client, {
            sessionUpdate: "tool_call_update", toolCallId: id, status: "completed",
            content: [textContent("built")],
        });
        return "end_turn";
    },

    async "loop-error"(s, client) {
        const times = s.turn === 1 ? 3 : 50;
        for (let i = 1; i <= times; i++) {
            if (s.cancelled) return "cancelled";
            const id = `call-${s.turn}-${i}`;
            await send(s, client, {
                sessionUpdate: "tool_call", toolCallId: id, title: "$ cat missing.txt",
                kind: "execute", status: "pending", rawInput: { command: "cat missing.txt" },
            });
            await send(s, client, {
                sessionUpdate: "tool_call_update", toolCallId: id, status: "failed",
                content: [textContent("cat: missing.txt: No such file or directory")],
            });
            await new Promise((resolve) => setImmediate(resolve)); /* let a cancel in */
        }
        return s.cancelled ? "cancelled" : "end_turn";
    },

    async "unknown-result"(s, client) {
        await send(s, client, {
            sessionUpdate: "tool_call_update", toolCallId: "never-announced", status: "completed",
            content: [textContent("orphan output")],
        });
        await send(s, client, chunk("done"));
        return "end_turn";
    },

    async flood(s, client, _text, deaf = false) {
        for (let i = 1; deaf || !s.cancelled; i++) {
            await send(s, client, chunk(`flood ${i}\n`));
            // awaited writes settle in microtasks; let the event loop read
            // stdin (EOF, session/cancel) between them
            await new Promise((resolve) => setImmediate(resolve));
        }
        return "cancelled";
    },

    async "flood-deaf"(s, client, text) {
        return run.flood(s, client, text, true);
    },

    async bigline(s) {
        const params = {
            sessionId: s.id,
            update: chunk("x".repeat(BIGLINE_TEXT_BYTES)),
        };
        strict(zod.zSessionNotification, params, "bigline's session/update");
        await rawWrite(JSON.stringify({ jsonrpc: "2.0", method: "session/update", params }) + "\n");
        return waitThenCancelled(s);
    },

    async badjson(s) {
        await rawWrite("this is not json\n");
        return waitThenCancelled(s);
    },

    async badrpc(s) {
        await rawWrite('{"jsonrpc":"2.0","id":99999,"result":{}}\n');
        await rawWrite('{"hello":1}\n');
        return waitThenCancelled(s);
    },

    async fs(s, client) {
        const canRead = clientCapabilities?.fs?.readTextFile === true;
        const canWrite = clientCapabilities?.fs?.writeTextFile === true;
        const attempt = async (what, op) => {
            try {
                return await op();
            } catch (err) {
                // an error response, or an answer that is not what ACP says
                const how = err instanceof acp.RequestError ? "refused" : "invalid";
                log(`fs ${what}: ${how}:`, err?.code ?? "", err?.message);
                return how;
            }
        };
        const read = async (p) => {
            const res = await client.request("fs/read_text_file", { sessionId: s.id, path: p });
            strict(zod.zReadTextFileResponse, res, `the client's fs/read_text_file response for ${p}`);
            log(`fs read ${p}: ok`);
            return res.content;
        };
        const write = async (p, content) => {
            const res = await client.request("fs/write_text_file", { sessionId: s.id, path: p, content });
            strict(zod.zWriteTextFileResponse, res, `the client's fs/write_text_file response for ${p}`);
            log(`fs write ${p}: ok`);
        };
        const R = canRead
            ? await attempt("read-outside", async () => (await read("/etc/hostname"), "ok"))
            : "skipped";
        const W = canWrite
            ? await attempt("write-outside", async () => (await write(`${s.cwd}/../escape.txt`, "escaped"), "ok"))
            : "skipped";
        const link = path.join(s.cwd, "link");
        try {
            fs.unlinkSync(link);
        } catch {
            // not there
        }
        fs.symlinkSync("/etc", link);
        const S = canRead
            ? await attempt("symlink", async () => (await read(`${link}/hostname`), "ok"))
            : "skipped";
        const inside = path.join(s.cwd, "inside.txt");
        const I = canRead && canWrite
            ? await attempt("inside", async () => {
                await write(inside, "hello");
                return (await read(inside)) === "hello" ? "ok" : "mismatch";
            })
            : "skipped";
        await send(s, client, chunk(`read-outside:${R} write-outside:${W} symlink:${S} inside:${I}`));
        return "end_turn";
    },

    async "fs-burst"(s, client) {
        const p = path.join(s.cwd, "burst.txt");
        await client.request("fs/write_text_file", { sessionId: s.id, path: p, content: "x" });
        const all = await Promise.allSettled(Array.from({ length: 12 },
            () => client.request("fs/read_text_file", { sessionId: s.id, path: p })));
        const read = all.filter((r) => r.status === "fulfilled" && r.value?.content === "x").length;
        const refused = all.filter((r) => r.status === "rejected" && r.reason instanceof acp.RequestError).length;
        await send(s, client, chunk(`read:${read} refused:${refused}`));
        return "end_turn";
    },

    async secrets(s, client, text) {
        const name = text.trim();
        const v = process.env[name] ?? "";
        if (process.env[name] === undefined) log(`secrets: ${JSON.stringify(name)} is not set`);
        const id = `call-${s.turn}-1`;
        await send(s, client, thought(`I will print ${v}`));
        await send(s, client, {
            sessionUpdate: "tool_call", toolCallId: id, title: `echo ${v}`, kind: "execute",
            status: "pending", rawInput: { command: `echo ${v}` },
        });
        await send(s, client, {
            sessionUpdate: "tool_call_update", toolCallId: id, status: "completed",
            content: [textContent(v)], rawOutput: { stdout: v },
        });
        await send(s, client, chunk(`the value is ${v}`));
        return "end_turn";
    },

    async slow(s, client, text) {
        await send(s, client, chunk(text));
        const release = path.join(s.cwd, RELEASE_FILE);
        let watcher;
        const released = new Promise((resolve) => {
            watcher = fs.watch(s.cwd, () => {
                if (fs.existsSync(release)) resolve();
            });
            if (fs.existsSync(release)) resolve();
        });
        try {
            const how = await Promise.race([
                released.then(() => "released"),
                waitCancel(s).then(() => "cancelled"),
            ]);
            if (how === "cancelled") return "cancelled";
            fs.rmSync(release, { force: true });
            return "end_turn";
        } finally {
            watcher.close();
        }
    },
};
for (const r of STOP_REASONS) {
    run[`stop-${r}`] = async (s, client) => {
        await send(s, client, chunk(`stopping: ${r}`));
        return r;
    };
}

// ------------------------------------------------------------ wiring ---
const loadable = behaviour === "crash-load";

const app = acp.agent({ name: `parley-acp-test-agent-${behaviour}` })
    .onRequest("initialize", ({ params }) => {
        clientCapabilities = params.clientCapabilities ?? {};
        log(`initialize: protocolVersion ${params.protocolVersion},`,
            `clientCapabilities ${JSON.stringify(clientCapabilities)}`);
        const res = {
            protocolVersion: acp.PROTOCOL_VERSION,
            agentCapabilities: {
                loadSession: loadable,
                promptCapabilities: { image: false, audio: false, embeddedContext: false },
            },
            authMethods: [],
            agentInfo: {
                name: "parley-acp-test-agent",
                title: `parley test agent (${behaviour})`,
                version: "1.0.0",
            },
        };
        strict(zod.zInitializeResponse, res, "initialize response");
        return res;
    })
    .onRequest("session/new", ({ params }) => {
        const id = `sess-${crypto.randomUUID()}`;
        let history = null;
        if (loadable) {
            history = historyPath(params.cwd, id);
            fs.mkdirSync(path.dirname(history), { recursive: true });
            fs.writeFileSync(history, "");
        }
        sessions.set(id, newSessionState(id, params.cwd, history));
        log(`session/new ${id} in ${params.cwd}`);
        return { sessionId: id };
    });

if (loadable) {
    app.onRequest("session/load", async ({ params, client }) => {
        const id = params.sessionId;
        const file = /^[A-Za-z0-9_.-]+$/.test(id) && !id.startsWith(".") ? historyPath(params.cwd, id) : null;
        if (!file || !fs.existsSync(file)) {
            log(`session/load ${id}: unknown`);
            throw acp.RequestError.sessionNotFound(id);
        }
        const updates = fs.readFileSync(file, "utf8").split("\n").filter((l) => l).map((l) => JSON.parse(l));
        const turns = updates.filter((u) => u.sessionUpdate === "user_message_chunk").length;
        // replayed without recording them again
        const s = newSessionState(id, params.cwd, null, turns);
        for (const u of updates) await send(s, client, u);
        s.history = file;
        sessions.set(id, s);
        log(`session/load ${id}: replayed ${updates.length} updates`);
        return {};
    });
}

// session/prompt is registered before session/cancel on purpose: the SDK
// dispatches messages concurrently, walking its handlers in registration
// order, so a prompt's handler starts before that of a cancel sent after it.
app.onRequest("session/prompt", async ({ params, client }) => {
    const s = sessions.get(params.sessionId);
    if (!s) throw acp.RequestError.sessionNotFound(params.sessionId);
    if (s.running) {
        throw acp.RequestError.invalidRequest(undefined, "a prompt is already running in this session");
    }
    s.running = true;
    s.cancelled = false;
    s.turn += 1;
    const text = params.prompt.filter((b) => b.type === "text").map((b) => b.text).join("");
    log(`session/prompt ${s.id} turn ${s.turn}: ${JSON.stringify(text.slice(0, 200))}`);
    try {
        if (s.history) {
            const user = { sessionUpdate: "user_message_chunk", content: { type: "text", text } };
            strict(zod.zSessionUpdate, user, "recorded user_message_chunk");
            fs.appendFileSync(s.history, JSON.stringify(user) + "\n");
        }
        const stopReason = await run[behaviour](s, client, text);
        log(`session/prompt ${s.id} turn ${s.turn}: ${stopReason}`);
        return { stopReason };
    } finally {
        s.running = false;
        s.cancelled = false;
        s.cancelWaiters = [];
    }
});

app.onNotification("session/cancel", ({ params }) => {
    const s = sessions.get(params.sessionId);
    if (!s || !s.running) {
        log(`session/cancel ${params.sessionId}: no prompt running, ignored`);
        return;
    }
    log(`session/cancel ${s.id}`);
    s.cancelled = true;
    for (const resolve of s.cancelWaiters.splice(0)) resolve();
});

process.stdout.on("error", (err) => {
    log(`stdout: ${err.code ?? err.message}; exiting`);
    process.exit(0);
});

const stream = acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
const connection = app.connect(stream);
connection.closed.then(() => {
    log("connection closed (stdin EOF); exiting");
    process.exit(0);
});
