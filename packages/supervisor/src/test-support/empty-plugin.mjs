// A plugin module that exports nothing Turnwarden can use.
export const version = 1;
