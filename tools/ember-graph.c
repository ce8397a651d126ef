/*
 * ember-graph — looks at a captured graph saved with em_graph_save (include/ember/graph.h):
 * prints a summary (its inputs, outputs and named state; kernel calls and FLOPs per op family
 * in the setup and in the step; parameter, initial-value and peak bytes) and/or writes its step
 * as a Graphviz digraph, to render with e.g. `dot -Tsvg step.dot -o step.svg`.
 *
 * Usage: ember-graph FILE [--summary] [--dot OUT.dot]
 *
 * With neither flag it prints the summary. A bad flag: one line on stderr and exit status 2;
 * a file it cannot load or write: em_last_error() and exit status 1.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ember/ember.h"
#include "ember/graph.h"

static void usage(FILE *f) {
    fprintf(f, "usage: ember-graph FILE [--summary] [--dot OUT.dot]\n"
               "  FILE: a graph saved with em_graph_save (safetensors)\n"
               "  --summary     print its inputs, outputs, state, kernel calls and FLOPs per op\n"
               "                family, and its bytes (the default when --dot is not given)\n"
               "  --dot OUT     write its step as a Graphviz digraph to OUT (render it with\n"
               "                dot -Tsvg OUT -o OUT.svg)\n");
}

static int bad(const char *fmt, const char *a) {
    fprintf(stderr, "ember-graph: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    return 2;
}

typedef struct config {
    const char *file, *dot;
    bool summary;
} config;

/** Parses argv into c; returns 0, or 2 after printing the reason (or -1 for --help). */
static int parse_args(int argc, char **argv, config *c) {
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) return -1;
        if (strcmp(f, "--summary") == 0) {
            c->summary = true;
        } else if (strcmp(f, "--dot") == 0) {
            if (i + 1 >= argc) return bad("--dot needs a value%s", "");
            c->dot = argv[++i];
        } else if (f[0] == '-' && f[1] != '\0') {
            return bad("unknown flag '%s' (see --help)", f);
        } else if (c->file) {
            return bad("one graph file at a time ('%s' is a second)", f);
        } else {
            c->file = f;
        }
    }
    if (!c->file) return bad("no graph file given (see --help)%s", "");
    if (!c->dot) c->summary = true;
    return 0;
}

int main(int argc, char **argv) {
    config c = {0};
    int rc = parse_args(argc, argv, &c);
    if (rc < 0) {
        usage(stdout);
        return 0;
    }
    if (rc != 0) return rc;
    em_graph *g = NULL;
    if (em_graph_load(c.file, &g) != EM_OK) {
        fprintf(stderr, "ember-graph: %s\n", em_last_error());
        return 1;
    }
    rc = 0;
    if (c.summary && em_graph_write_summary(g, stdout) != EM_OK) {
        fprintf(stderr, "ember-graph: %s\n", em_last_error());
        rc = 1;
    }
    if (rc == 0 && c.dot && em_graph_write_dot(g, c.dot) != EM_OK) {
        fprintf(stderr, "ember-graph: %s\n", em_last_error());
        rc = 1;
    }
    em_graph_release(g);
    return rc;
}
