/* notplugin.c — a shared module that is not an ember plugin (it exports neither
 * ember_plugin_abi nor ember_plugin_init). */
int notplugin_answer(void);
int notplugin_answer(void) { return 42; }
