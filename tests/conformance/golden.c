/* golden.c — reading golden.txt (see golden.h) and the params API of conformance.h. */
#include <stdlib.h>
#include <string.h>

#include "golden.h"

/* ---- the params API the wrappers call ---- */

static const conf_param *find_param(const conf_params *p, const char *key) {
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->p[i].key, key) == 0) return &p->p[i];
    return NULL;
}

int64_t conf_int(const conf_params *p, const char *key, int64_t def) {
    const conf_param *q = find_param(p, key);
    return q && q->n > 0 ? (int64_t)q->values[0] : def;
}

double conf_f64(const conf_params *p, const char *key, double def) {
    const conf_param *q = find_param(p, key);
    return q && q->n > 0 ? q->values[0] : def;
}

bool conf_bool(const conf_params *p, const char *key, bool def) {
    const conf_param *q = find_param(p, key);
    return q && q->n > 0 ? q->values[0] != 0 : def;
}

int conf_ints(const conf_params *p, const char *key, int64_t *out, int cap) {
    const conf_param *q = find_param(p, key);
    if (!q) return -1;
    for (int i = 0; i < q->n && i < cap; i++) out[i] = (int64_t)q->values[i];
    return q->n;
}

conf_fn golden_find_op(const char *name) {
    static const conf_op *const families[] = {conf_ops_elementwise, conf_ops_reduce,
                                              conf_ops_layout, conf_ops_nn,
                                              conf_ops_norm, conf_ops_quant};
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (const conf_op *o = families[f]; o->name; o++)
            if (strcmp(o->name, name) == 0) return o->fn;
    return NULL;
}

/* ---- parsing ---- */

bool golden_is_float(em_dtype dt) { return em_dtype_kind(dt) == EM_KIND_FLOAT; }

/* "<dtype> <rank> <dims...> : <values...>" */
static int parse_tensor(char *line, golden_tensor *t) {
    /* "<dtype> <rank> <dims...> : <values...>" */
    char *save = NULL;
    char *tok = strtok_r(line, " ", &save);
    if (!tok || em_dtype_parse(tok, &t->dt) != EM_OK) return -1;
    tok = strtok_r(NULL, " ", &save);
    if (!tok) return -1;
    t->rank = atoi(tok);
    if (t->rank < 0 || t->rank > EM_MAX_RANK) return -1;
    t->n = 1;
    for (int i = 0; i < t->rank; i++) {
        tok = strtok_r(NULL, " ", &save);
        if (!tok) return -1;
        t->shape[i] = atoll(tok);
        t->n *= t->shape[i];
    }
    tok = strtok_r(NULL, " ", &save);
    if (!tok || strcmp(tok, ":") != 0) return -1;
    t->vals = calloc((size_t)(t->n ? t->n : 1), sizeof(double));
    t->ivals = calloc((size_t)(t->n ? t->n : 1), sizeof(int64_t));
    if (!t->vals || !t->ivals) return -1;
    for (int64_t i = 0; i < t->n; i++) {
        tok = strtok_r(NULL, " \n", &save);
        if (!tok) return -1;
        t->vals[i] = strtod(tok, NULL);
        t->ivals[i] = golden_is_float(t->dt) ? 0 : strtoll(tok, NULL, 10);
    }
    return 0;
}

/* "<kind> <n> <args...>" ("none" for an absent argument) */
static int parse_view(char *line, golden_tensor *t) {
    char *save = NULL;
    char *tok = strtok_r(line, " ", &save);
    if (!tok) return -1;
    snprintf(t->view_kind, sizeof t->view_kind, "%s", tok);
    tok = strtok_r(NULL, " ", &save);
    if (!tok) return -1;
    t->nview = atoi(tok);
    if (t->nview < 0 || t->nview > 16) return -1;
    for (int i = 0; i < t->nview; i++) {
        tok = strtok_r(NULL, " \n", &save);
        if (!tok) return -1;
        t->view_none[i] = strcmp(tok, "none") == 0;
        t->view_args[i] = t->view_none[i] ? 0 : atoll(tok);
    }
    return 0;
}

/* "<key> <n> <values...>" */
static int parse_param(char *line, conf_params *p) {
    if (p->n >= CONF_MAX_PARAMS) return -1;
    conf_param *q = &p->p[p->n];
    char *save = NULL;
    char *tok = strtok_r(line, " ", &save);
    if (!tok) return -1;
    snprintf(q->key, sizeof q->key, "%s", tok);
    tok = strtok_r(NULL, " ", &save);
    if (!tok) return -1;
    q->n = atoi(tok);
    if (q->n < 0 || q->n > CONF_MAX_PARAM_VALUES) return -1;
    for (int i = 0; i < q->n; i++) {
        tok = strtok_r(NULL, " \n", &save);
        if (!tok) return -1;
        q->values[i] = strtod(tok, NULL);
    }
    p->n++;
    return 0;
}

/* Reads a whole line of any length; returns NULL at EOF. The caller frees. */
static char *read_line(FILE *f) {
    size_t cap = 256, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    int ch;
    while ((ch = fgetc(f)) != EOF && ch != '\n') {
        if (n + 1 >= cap) {
            cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
        }
        buf[n++] = (char)ch;
    }
    if (ch == EOF && n == 0) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

static int parse_case_line(golden_case *c, char *line) {
    if (strncmp(line, "op ", 3) == 0) snprintf(c->op, sizeof c->op, "%s", line + 3);
    else if (strncmp(line, "param ", 6) == 0) return parse_param(line + 6, &c->params);
    else if (strncmp(line, "input ", 6) == 0) {
        if (c->nin >= CONF_MAX_IO) return -1;
        return parse_tensor(line + 6, &c->in[c->nin++]);
    } else if (strncmp(line, "view ", 5) == 0) {
        if (c->nin == 0) return -1;
        return parse_view(line + 5, &c->in[c->nin - 1]);
    } else if (strncmp(line, "output ", 7) == 0) {
        if (c->nout >= CONF_MAX_IO) return -1;
        return parse_tensor(line + 7, &c->out[c->nout++]);
    } else if (strncmp(line, "error ", 6) == 0) snprintf(c->error, sizeof c->error, "%s", line + 6);
    else if (strncmp(line, "tol ", 4) == 0) {
        c->has_tol = true;
        if (sscanf(line + 4, "%lf %lf", &c->rtol, &c->atol) != 2) return -1;
    } else return -1;
    return 0;
}

void golden_free(golden_case *c) {
    for (int i = 0; i < c->nin; i++) {
        free(c->in[i].vals);
        free(c->in[i].ivals);
    }
    for (int i = 0; i < c->nout; i++) {
        free(c->out[i].vals);
        free(c->out[i].ivals);
    }
    memset(c, 0, sizeof *c);
}

int golden_next(FILE *f, const char *path, int *lineno, golden_case *c) {
    golden_free(c);
    bool in_case = false;
    char *line;
    while ((line = read_line(f)) != NULL) {
        (*lineno)++;
        int rc = 0;
        if (line[0] == '#' || line[0] == '\0') {
            /* a comment or blank line */
        } else if (strncmp(line, "case ", 5) == 0) {
            golden_free(c);
            snprintf(c->name, sizeof c->name, "%s", line + 5);
            in_case = true;
        } else if (strcmp(line, "end") == 0 && in_case) {
            free(line);
            return 1;
        } else if (!in_case || parse_case_line(c, line) != 0) {
            fprintf(stderr, "%s:%d: cannot parse this line\n", path, *lineno);
            rc = -1;
        }
        free(line);
        if (rc) {
            golden_free(c);
            return rc;
        }
    }
    golden_free(c);
    return 0;
}

em_status golden_view(const golden_tensor *t, em_tensor *base, em_tensor **out) {
    if (!t->view_kind[0]) {
        em_tensor_retain(base);
        *out = base;
        return EM_OK;
    }
    const int64_t *a = t->view_args;
    if (strcmp(t->view_kind, "transpose") == 0)
        return em_transpose(base, (int)a[0], (int)a[1], out);
    if (strcmp(t->view_kind, "permute") == 0) {
        int perm[EM_MAX_RANK];
        for (int i = 0; i < t->nview && i < EM_MAX_RANK; i++) perm[i] = (int)a[i];
        return em_permute(base, perm, t->nview, out);
    }
    if (strcmp(t->view_kind, "slice") == 0) {
        int64_t step = t->view_none[3] ? 1 : a[3];
        int64_t start = t->view_none[1] ? (step > 0 ? 0 : INT64_MAX) : a[1];
        int64_t stop = t->view_none[2] ? (step > 0 ? INT64_MAX : INT64_MIN) : a[2];
        return em_slice(base, (int)a[0], start, stop, step, out);
    }
    if (strcmp(t->view_kind, "expand") == 0) return em_expand(base, a, t->nview, out);
    if (strcmp(t->view_kind, "flip") == 0) {
        int dims[EM_MAX_RANK];
        for (int i = 0; i < t->nview && i < EM_MAX_RANK; i++) dims[i] = (int)a[i];
        return em_flip(base, dims, t->nview, out);
    }
    return EM_ERR_ARG;
}
