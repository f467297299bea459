/* es_options.c - the es backend's own options (its tl_store_options), see config.h
 *
 * es_url, es_index, es_user, es_password_file, es_api_key_file, es_cacert,
 * es_timeout_ms, es_start_timeout, es_inflight, es_scripts, es_insecure,
 * es_allow_insecure: parsed by this table over the same command line and
 * config file as the options of config.c, checked here, kept in struct
 * es_options (es_internal.h). owner and lease_ttl
 * are store-generic (any store shared by many mounts has owners and
 * leases) and stay in tl_config, checked there.
 */
#include <config.h>

#include <ctype.h>
#include <errno.h>
#include <fuse_opt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "es/es_internal.h"
#include "es/es_store.h"
#include "es/httpc.h"
#include "config/config.h"

#define OPT_STR(name, field) TL_OPT_STR(name, struct es_options, field)

/* owner= is checked for every store (config.c), to this length */
_Static_assert(ES_NAME_MAX == TL_OWNER_MAX, "owner= names must fit owner ids");

static const struct fuse_opt es_opts[] = {
	OPT_STR("es_url", url),
	OPT_STR("es_index", index),
	OPT_STR("es_user", user),
	OPT_STR("es_password_file", password_file),
	OPT_STR("es_api_key_file", api_key_file),
	OPT_STR("es_cacert", cacert),
	OPT_STR("es_timeout_ms", timeout_ms_s),
	OPT_STR("es_start_timeout", start_timeout_s),
	OPT_STR("es_inflight", inflight_s),
	OPT_STR("es_scripts", scripts_s),
	/* refused by es_opts_validate(); parsed so that no one echoes them */
	OPT_STR("es_password", password_arg),
	OPT_STR("es_api_key", api_key_arg),
	TL_OPT_BOOL("es_insecure", struct es_options, insecure),
	TL_OPT_BOOL("es_group_commit", struct es_options, group_commit),
	TL_OPT_BOOL("es_allow_insecure", struct es_options, allow_insecure),
	/* as the config file and -o lists write it */
	{"es_allow_insecure=1", offsetof(struct es_options, allow_insecure), 1},
	{"es_allow_insecure=0", offsetof(struct es_options, allow_insecure), 0},
	{"--es_allow_insecure=1", offsetof(struct es_options, allow_insecure), 1},
	{"--es_allow_insecure=0", offsetof(struct es_options, allow_insecure), 0},
	FUSE_OPT_END,
};

static const char es_help[] =
	"    --es_url=URL[,URL...]    Elasticsearch/OpenSearch nodes, tried in turn\n"
	"                             (in -o lists separate URLs with ';')\n"
	"    --es_index=NAME          lock index (default treelockfs-locks)\n"
	"    --es_user=NAME           user for basic authentication\n"
	"    --es_password_file=FILE  its password (file mode 600, owned by root or you);\n"
	"                             or the environment variable TREELOCKFS_ES_PASSWORD\n"
	"    --es_api_key_file=FILE   API key (id:key or encoded; file mode 600, owned by\n"
	"                             root or you)\n"
	"    --es_cacert=FILE         CA certificate(s) for https\n"
	"    --es_insecure            do not verify the server's certificate (warns)\n"
	"    --es_allow_insecure=1    let credentials go to an http:// URL, unencrypted\n"
	"                             (refused without it; warns)\n"
	"    --es_timeout_ms=MS       per-request timeout (default 5000)\n"
	"    --es_start_timeout=SECS  retry a failing store at start for up to\n"
	"                             SECS seconds (default 30)\n"
	"    --es_inflight=N          lock store requests of this mount in flight at\n"
	"                             once (1-16, default 2); renames that find one\n"
	"                             out share the next, and a further one leaves\n"
	"                             once 4 wait or one waited 50 ms\n"
	"    --no_es_group_commit     each rename sends its own requests at once\n"
	"                             (up to 16 in flight; es_inflight unused)\n"
	"    --es_scripts=stored|inline  lock scripts stored in the cluster and named\n"
	"                             by id (default), or their source sent with every\n"
	"                             request, for clusters whose script administrators\n"
	"                             are not trusted\n";

const struct es_options *es_options_of(const struct tl_config *cfg)
{
	return config_store_opts(cfg, TL_STORE_ES);
}

static int es_opts_init(void *p)
{
	struct es_options *o = p;

	/* strdup the defaults: fuse_opt frees a string option it overwrites */
	o->index = strdup(ES_DEFAULT_INDEX);
	o->timeout_ms = ES_DEFAULT_TIMEOUT_MS;
	o->start_timeout = ES_DEFAULT_START_TIMEOUT;
	o->inflight = ES_BATCH_INFLIGHT;
	o->group_commit = 1;
	return o->index ? 0 : -ENOMEM;
}

static bool valid_index_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 255 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
		return false;
	if (s[0] == '-' || s[0] == '_' || s[0] == '+')
		return false;
	for (; *s; s++)
		if (isupper((unsigned char)*s) || strchr("\\/*?\"<>| ,#:", *s))
			return false;
	return true;
}

bool es_opts_cleartext(const struct es_options *o)
{
	const char *u;

	for (u = o->url ? o->url : ""; *u;) {
		size_t len = strcspn(u, ",; \t");

		if (len >= 7 && strncasecmp(u, "http://", 7) == 0)
			return true;
		u += len;
		u += strspn(u, ",; \t");
	}
	return false;
}

static void es_opts_validate(void *p, struct tl_config *cfg, bool selected)
{
	struct es_options *o = p;
	const char *u;

	config_parse_uint(cfg, "es_timeout_ms", o->timeout_ms_s, 1, 600000, &o->timeout_ms);
	config_parse_uint(cfg, "es_start_timeout", o->start_timeout_s, 0, 3600,
			  &o->start_timeout);
	config_parse_uint(cfg, "es_inflight", o->inflight_s, 1, ES_BATCH_INFLIGHT_MAX,
			  &o->inflight);
	if (o->scripts_s) {
		if (strcmp(o->scripts_s, "inline") == 0)
			o->scripts_inline = 1;
		else if (strcmp(o->scripts_s, "stored") == 0)
			o->scripts_inline = 0;
		else
			config_value_error(cfg, "es_scripts", o->scripts_s,
					   "invalid es_scripts '%s': expected stored or inline",
					   o->scripts_s);
	}
	/* secrets in options show in ps(1), shell histories and config files
	 * others read: refused, and never repeated in the message */
	if (o->password_arg)
		config_error(cfg, "es_password is refused: a password in an option can be seen by "
				  "others; use es_password_file=FILE (mode 600) or %s",
			     ES_PASSWORD_ENV);
	if (o->api_key_arg)
		config_error(cfg, "es_api_key is refused: a key in an option can be seen by "
				  "others; use es_api_key_file=FILE (mode 600)");
	if (o->url && strchr(o->url, '@')) {
		config_error(cfg, "es_url is refused: it carries credentials (user:password@); use "
				  "es_user=NAME with es_password_file=FILE or %s", ES_PASSWORD_ENV);
		return; /* the other checks would print the URL */
	}
	if (!selected)
		return;
	if (o->cacert)
		config_path_absolute(cfg, "es_cacert", &o->cacert);
	if (!o->url || !*o->url) {
		config_error(cfg, "lock_store=es needs es_url=URL[,URL...]");
	} else {
		for (u = o->url; *u;) {
			size_t len = strcspn(u, ",; \t");

			if (len && strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0)
				config_value_error(cfg, "es_url", o->url,
						   "invalid es_url '%.*s': expected http:// or https://",
						   (int)len, u);
			u += len;
			u += strspn(u, ",; \t");
		}
	}
	if ((o->user || o->api_key_file) && !o->allow_insecure && es_opts_cleartext(o))
		config_error(cfg, "es_url names an http:// node: the credentials (%s) would travel "
				  "unencrypted; use https:// (es_cacert=FILE), or es_allow_insecure=1 "
				  "to send them anyway", o->user ? "es_user" : "es_api_key_file");
	if (!valid_index_name(o->index))
		config_value_error(cfg, "es_index", o->index,
				   "invalid es_index '%s': lowercase, no backslash, /*?\"<>|,#: or "
				   "space, not starting with - _ +", o->index);
	if (o->password_file && o->api_key_file)
		config_error(cfg, "es_password_file and es_api_key_file exclude each other");
	if (o->password_file && !o->user)
		config_error(cfg, "es_password_file needs es_user=NAME");
}

static void es_opts_load_secrets(void *p, struct tl_config *cfg)
{
	struct es_options *o = p;
	const char *env = getenv(ES_PASSWORD_ENV);

	if (o->password_file)
		o->password = config_read_secret(cfg, "es_password_file", o->password_file);
	else if (env && *env && o->user)
		o->password = strdup(env);
	if (o->api_key_file)
		o->api_key = config_read_secret(cfg, "es_api_key_file", o->api_key_file);
	if (o->user && !o->password && !o->password_file)
		config_error(cfg, "es_user needs es_password_file=FILE or %s in the environment",
			     ES_PASSWORD_ENV);
}

static void wipe_free(char *s)
{
	if (!s)
		return;
	explicit_bzero(s, strlen(s));
	free(s);
}

static void es_opts_free(void *p)
{
	struct es_options *o = p;

	free(o->url);
	free(o->index);
	free(o->user);
	free(o->password_file);
	free(o->api_key_file);
	free(o->cacert);
	free(o->timeout_ms_s);
	free(o->start_timeout_s);
	free(o->inflight_s);
	free(o->scripts_s);
	wipe_free(o->password);
	wipe_free(o->api_key);
	wipe_free(o->password_arg);
	wipe_free(o->api_key_arg);
	memset(o, 0, sizeof(*o));
}

const struct tl_store_options es_store_options = {
	.size = sizeof(struct es_options),
	.opts = es_opts,
	.help = es_help,
	.init = es_opts_init,
	.validate = es_opts_validate,
	.load_secrets = es_opts_load_secrets,
	.free = es_opts_free,
};

void es_options_httpc(const struct es_options *eo, struct httpc_config *hc)
{
	hc->urls = eo->url;
	hc->user = eo->user;
	hc->password = eo->password;
	hc->api_key = eo->api_key;
	hc->cacert = eo->cacert;
	hc->insecure = eo->insecure;
}
