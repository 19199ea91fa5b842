// ndtrain command-line entry point (train, bench, ...). Filled in with the trainer.
int main() {
  return 0;
}
