/*
 * A minimal elastic application-channel client in C: proof that protocol/PROTOCOL.md is
 * enough for a non-Python program. Build: gcc -O2 -Wall -o elastic_client elastic_client.c
 *
 * Usage (as a job's command): elastic_client ORDERS
 *   The leader (ELASTIC_NODE_INDEX=0, not joining) registers, obeys ORDERS shrink/grow
 *   orders (releasing its last hosts on a shrink), then deregisters, writes the file
 *   "finish" in its working directory and exits 0. Other processes wait for that file.
 *   A `hosts` line (the daemon changed the job's hosts on its own) replaces its host list.
 */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_LINE 8192
#define MAX_HOSTS 1024

static FILE *in;
static int fd;
static char *hosts[MAX_HOSTS];
static int nhosts;

static void die(const char *what) { fprintf(stderr, "elastic_client: %s\n", what); exit(2); }

static void send_line(const char *line) {
    size_t len = strlen(line);
    if (write(fd, line, len) != (ssize_t)len || write(fd, "\n", 1) != 1) die("write failed");
}

static void read_line(char *buf) {
    if (!fgets(buf, MAX_LINE + 2, in)) die("daemon closed the connection");
    buf[strcspn(buf, "\r\n")] = 0;
}

/* `hosts H... reason=R [order=ID]`: the daemon changed the job's hosts on its own (a node
 * failed, a deadline passed); the list is the job's now. Returns 1 if LINE was one. */
static int apply_hosts(char *line) {
    if (strncmp(line, "hosts ", 6) != 0 && strcmp(line, "hosts") != 0) return 0;
    char *copy = strdup(line), *reason = "?";
    nhosts = 0;
    strtok(copy, " ");
    for (char *w = strtok(NULL, " "); w; w = strtok(NULL, " ")) {
        if (strncmp(w, "reason=", 7) == 0) reason = w + 7;
        else if (!strchr(w, '=') && nhosts < MAX_HOSTS) hosts[nhosts++] = w;
    }
    printf("elastic_client: the daemon set the job's hosts (%s): %d hosts\n", reason, nhosts);
    return 1;
}

static void expect_ok(const char *verb) {
    char buf[MAX_LINE + 2];
    do read_line(buf); while (apply_hosts(buf));  /* unsolicited lines may come before the reply */
    if (strncmp(buf, "ok ", 3) != 0) { fprintf(stderr, "elastic_client: %s: %s\n", verb, buf); exit(3); }
}

/* An answer to an order. `error state_write_failed`: the daemon could not save it (its disk
 * is full) and did not take it; the same answer is sent again until it is. */
static void answer(const char *line, const char *verb) {
    char buf[MAX_LINE + 2];
    for (;;) {
        send_line(line);
        do read_line(buf); while (apply_hosts(buf));
        if (strncmp(buf, "ok ", 3) == 0) return;
        if (strncmp(buf, "error state_write_failed", 24) != 0) {
            fprintf(stderr, "elastic_client: %s: %s\n", verb, buf);
            exit(3);
        }
        fprintf(stderr, "elastic_client: %s not saved by the daemon; sending it again\n", verb);
        sleep(1);
    }
}

/* The value of key=VALUE among the words of a line, or NULL. */
static const char *option(char **words, int n, const char *key) {
    size_t k = strlen(key);
    for (int i = 0; i < n; i++)
        if (strncmp(words[i], key, k) == 0 && words[i][k] == '=') return words[i] + k + 1;
    return NULL;
}

int main(int argc, char **argv) {
    int orders = argc > 1 ? atoi(argv[1]) : 2;
    const char *addr = getenv("ELASTIC_APP_ADDRESS"), *job = getenv("ELASTIC_JOB_ID");
    const char *secret = getenv("ELASTIC_JOB_SECRET"), *list = getenv("ELASTIC_JOB_HOSTS");
    const char *index = getenv("ELASTIC_NODE_INDEX"), *joining = getenv("ELASTIC_JOINING");
    if (!addr || !job || !secret || !list || !index) die("not inside an elastic job");

    if (strcmp(index, "0") != 0 || (joining && strcmp(joining, "1") == 0)) {
        while (access("finish", F_OK) != 0) usleep(20000);
        return 0;
    }

    char *hostlist = strdup(list);
    for (char *h = strtok(hostlist, ","); h && nhosts < MAX_HOSTS; h = strtok(NULL, ",")) hosts[nhosts++] = h;

    char host[256], port[16];
    const char *colon = strrchr(addr, ':');
    if (!colon || colon - addr >= (long)sizeof host) die("bad ELASTIC_APP_ADDRESS");
    memcpy(host, addr, colon - addr);
    host[colon - addr] = 0;
    snprintf(port, sizeof port, "%s", colon + 1);
    struct addrinfo hints = {0}, *res;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res) != 0) die("cannot resolve the daemon");
    fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
    if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0) die("cannot connect to the daemon");
    freeaddrinfo(res);
    in = fdopen(dup(fd), "r");

    char line[MAX_LINE + 2], out[MAX_LINE + 2];
    snprintf(out, sizeof out, "hello 1 %s %s", job, secret);
    send_line(out);
    expect_ok("hello");
    send_line("register");
    expect_ok("register");

    for (int done = 0; done < orders;) {
        read_line(line);
        if (apply_hosts(line)) continue;
        char *words[MAX_HOSTS + 8];
        int n = 0;
        for (char *w = strtok(line, " "); w && n < MAX_HOSTS + 8; w = strtok(NULL, " ")) words[n++] = w;
        if (n < 2) continue;
        const char *order = option(words, n, "order");
        int count = atoi(words[1]);
        if (!order || count <= 0) continue;
        if (strcmp(words[0], "shrink") == 0 && count < nhosts) {
            int len = snprintf(out, sizeof out, "shrunk order=%s", order);
            for (int i = 0; i < count; i++) len += snprintf(out + len, sizeof out - len, " %s", hosts[nhosts - 1 - i]);
            nhosts -= count;
            answer(out, "shrunk");
        } else if (strcmp(words[0], "grow") == 0 && n >= 2 + count) {
            for (int i = 0; i < count && nhosts < MAX_HOSTS; i++) hosts[nhosts++] = strdup(words[2 + i]);
            int len = snprintf(out, sizeof out, "grown order=%s", order);
            for (int i = 0; i < nhosts; i++) len += snprintf(out + len, sizeof out - len, " %s", hosts[i]);
            answer(out, "grown");
        } else {
            snprintf(out, sizeof out, "refuse order=%s cannot do that", order);
            answer(out, "refuse");
        }
        done++;
    }
    send_line("deregister");
    expect_ok("deregister");
    FILE *f = fopen("finish", "w");
    if (f) fclose(f);
    printf("elastic_client: obeyed %d orders, ending on %d hosts\n", orders, nhosts);
    return 0;
}
