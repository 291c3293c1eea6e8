/*
 * cmd_acp.c - `parley acp`: an Agent Client Protocol agent on stdin and
 * stdout that editors spawn (Zed's agent_servers, JetBrains, Neovim...),
 * each session a parley conversation: on a server (--url) or in this
 * process (--data). Logs go to stderr only; stdout carries one JSON-RPC
 * message a line.
 *
 * One thread runs the protocol core (acp_agent.h) over one inbox
 * (acp_inbox.h) that stdin's reader and the conversations' events feed,
 * and is the only writer of stdout. stdin's end ends the command (exit 0):
 * the turns still running are paused first (acpa_eof); the conversations
 * go on where they live.
 */
#include "acp_backend.h"
#include "actors/acp_registry.h"
#include "cli.h"
#include "remote.h"
#include "runtime/units.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: parley acp --url URL [--api-key KEY] [--agent NAME]\n"
    "       parley acp --data DIR [--agent NAME=COMMAND]... [--agents FILE]\n"
    "                  [--default-agent NAME]\n"
    "       (both take --always-approve and --max-pending SIZE)\n\n"
    "An Agent Client Protocol (version 1) agent on stdin and stdout, one JSON-RPC\n"
    "message a line, for editors to spawn: each session is a parley conversation.\n"
    "session/new creates one (its id is the session id), session/load replays one\n"
    "whole (user messages too) and follows it, session/prompt posts the prompt, runs\n"
    "the conversation's agent and streams its events until the turn ends,\n"
    "session/cancel pauses it; a confirmation the conversation waits for is asked of\n"
    "the editor (session/request_permission). What other clients add to a\n"
    "conversation shows in the editor too. Logs go to stderr; it exits 0 when stdin\n"
    "ends, after pausing the turns still running (the conversations go on).\n\n"
    "conversations on a server of the API (parley serve, an OpenHands agent-server):\n"
    "  --url URL            the server, http:// or https://\n" REMOTE_HELP
    "  --agent NAME         sessions host the server's agent NAME (default: the\n"
    "                       server's default agent)\n\n"
    "conversations in this process (no server needed):\n"
    "  --data DIR           the data directory (as parley serve's; one process at a\n"
    "                       time may hold it)\n"
    "  --agent NAME=COMMAND register an agent (as parley serve's --agent); sessions\n"
    "                       host it when it is the only one or the default\n"
    "  --agent NAME         sessions host the registered agent NAME\n"
    "  --agents FILE        register the agents of a JSON file (as parley serve's)\n"
    "  --default-agent NAME the agent sessions host (default: the only one)\n\n"
    "The editor's cwd (session/new's) is the conversation's workspace.working_dir.\n"
    "With --data the hosted agent works there: its session's cwd, the root of the\n"
    "files it reads and writes through parley, its process's directory unless the\n"
    "agent is registered with a cwd of its own. With --url where the agent works is\n"
    "the server's business (parley serve: a directory of the conversation's own\n"
    "under its data directory, whatever the editor's cwd).\n\n"
    "  --always-approve     sessions made here never ask the editor to confirm\n"
    "                       (default: confirmation_policy AlwaysConfirm: each\n"
    "                       permission a hosted agent asks, each action of an\n"
    "                       OpenHands agent, is asked of the editor)\n"
    "  --max-pending SIZE   updates waiting for an editor that does not read, per\n"
    "                       process, before a conversation is cut off (its prompt\n"
    "                       fails; load the session again) (default 256M)\n"
    "  -h, --help           show this help\n\n"
    "Exit status: 0 when stdin ends, 1 if it cannot start, 2 bad usage.\n";

static void write_line(void *ctx, const char *line, size_t len)
{
    (void)ctx;
    if (fwrite(line, 1, len, stdout) != len || fflush(stdout) != 0)
        fprintf(stderr, "parley acp: cannot write to stdout\n");
}

/* The core on the inbox until stdin ends. */
static void serve(acpa *a, acp_inbox *in)
{
    for (;;) {
        acp_item *i = acp_inbox_pop(in);
        acp_item_kind k = i->kind;
        switch (k) {
        case ACPI_LINE:
            acpa_line(a, i->data, i->len);
            break;
        case ACPI_TOO_LONG:
            acpa_line_too_long(a);
            break;
        case ACPI_EVENT:
            acpa_event(a, i->cid, i->data, i->len);
            break;
        case ACPI_SYNCED:
            acpa_synced(a, i->cid);
            break;
        case ACPI_ENDED:
            acpa_ended(a, i->cid, i->data);
            break;
        case ACPI_EOF:
            acpa_eof(a);
            break;
        }
        free(i);
        if (k == ACPI_EOF)
            return;
    }
}

int cmd_acp(int argc, char **argv)
{
    static const struct option opts[] = {{"url", required_argument, NULL, 'u'},
                                         {"data", required_argument, NULL, 'd'},
                                         {"agent", required_argument, NULL, 'a'},
                                         {"agents", required_argument, NULL, 'A'},
                                         {"default-agent", required_argument, NULL, 'D'},
                                         {"max-pending", required_argument, NULL, 'P'},
                                         {"always-approve", no_argument, NULL, 'Y'},
                                         {"help", no_argument, NULL, 'h'},
                                         REMOTE_OPTIONS,
                                         {NULL, 0, NULL, 0}};
    const char *url = NULL, *data = NULL, *agent = NULL, *def = NULL;
    uint64_t pending = ACP_PENDING_DEFAULT;
    acp_approve approve = ACP_ASK;
    remote_opts ro = {0};
    acp_registry reg = {0};
    char why[512];
    int c, rc = CLI_USAGE;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (remote_option(&ro, c, optarg))
            continue;
        switch (c) {
        case 'u':
            url = optarg;
            break;
        case 'd':
            data = optarg;
            break;
        case 'a':
            if (strchr(optarg, '=') == NULL) {
                agent = optarg;
            } else if (acp_registry_add_arg(&reg, optarg, why, sizeof(why)) != 0) {
                cli_usage_error("acp", "%s", why);
                goto out;
            }
            break;
        case 'A':
            if (serve_read_agents(optarg, &reg, why, sizeof(why)) != 0) {
                cli_usage_error("acp", "--agents %s: %s", optarg, why);
                goto out;
            }
            break;
        case 'D':
            def = optarg;
            break;
        case 'P':
            if (rt_parse_bytes(optarg, &pending) != 0 || pending < 4096 || pending > (1ull << 40)) {
                cli_usage_error("acp", "--max-pending wants a size from 4K to 1T, not '%s'",
                                optarg);
                goto out;
            }
            break;
        case 'Y':
            approve = ACP_ALWAYS_APPROVE;
            break;
        case 'h':
            fputs(usage, stdout);
            rc = CLI_OK;
            goto out;
        default:
            cli_usage_error("acp", "bad option");
            goto out;
        }
    }
    if (optind < argc) {
        cli_usage_error("acp", "unexpected argument '%s'", argv[optind]);
        goto out;
    }
    if ((url == NULL) == (data == NULL)) {
        cli_usage_error("acp", "one of --url and --data is needed");
        goto out;
    }
    if (url != NULL && (reg.n > 0 || def != NULL)) {
        cli_usage_error("acp", "--url uses the server's agents: --agent NAME only");
        goto out;
    }
    if (data != NULL && (ro.api_key != NULL || ro.ca_file != NULL || ro.insecure)) {
        cli_usage_error("acp", "--api-key, --ca-file and --insecure go with --url");
        goto out;
    }
    if (data != NULL && agent == NULL)
        agent = def != NULL ? def : reg.n == 1 ? reg.agents[0].name : NULL;
    if (data != NULL && agent != NULL && acp_registry_find(&reg, agent) == NULL) {
        cli_usage_error("acp", "no agent %s registered (--agent NAME=COMMAND)", agent);
        goto out;
    }

    acp_inbox *in = acp_inbox_new(pending);
    acpa_backend b;
    acp_remote *r = NULL;
    acp_local *l = NULL;
    rc = CLI_FAIL;
    if (in == NULL) {
        fprintf(stderr, "parley acp: out of memory\n");
        goto out;
    }
    if (url != NULL) {
        net_url u;
        net_tls_config *tls;
        if (remote_setup("acp", url, &ro, &u, &tls) != 0) {
            acp_inbox_free(in);
            rc = CLI_USAGE;
            goto out;
        }
        if ((r = acp_remote_new(&u, tls, ro.api_key, agent, approve, in, &b)) == NULL)
            fprintf(stderr, "parley acp: cannot start the client\n");
    } else {
        pl_agent *pa = calloc(reg.n + 1, sizeof(*pa));
        for (size_t i = 0; pa != NULL && i < reg.n; i++)
            pa[i] = (pl_agent){.name = reg.agents[i].name,
                               .argv = (const char *const *)reg.agents[i].argv,
                               .env = (const char *const *)reg.agents[i].env,
                               .cwd = reg.agents[i].cwd};
        pl_options po = {.data_dir = data,
                         .agents = pa,
                         .nagents = pa != NULL ? reg.n : 0,
                         .default_agent = agent,
                         .agents_in_working_dir = 1}; /* the editor is the user */
        if ((l = acp_local_new(&po, agent, approve, in, &b, why, sizeof(why))) == NULL)
            fprintf(stderr, "parley acp: %s\n", why);
        free(pa);
    }
    acpa *a = (r != NULL || l != NULL) ? acpa_new(&b, write_line, NULL) : NULL;
    if (a != NULL && acp_inbox_read(in, STDIN_FILENO) == 0) {
        fprintf(stderr, "parley acp: ready (%s %s)\n", url != NULL ? "server" : "data",
                url != NULL ? url : data);
        serve(a, in);
        rc = CLI_OK;
    }
    acp_remote_free(r); /* no event comes after */
    acp_local_free(l);
    acpa_free(a);
    acp_inbox_free(in);
out:
    acp_registry_clear(&reg);
    return rc;
}
