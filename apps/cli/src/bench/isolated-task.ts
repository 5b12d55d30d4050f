/** The isolation bench's task: a synchronous loop that only terminating its thread ends. */
export function spin(): never {
  for (;;) {
    // wedged
  }
}
