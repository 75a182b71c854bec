"""Build and share an image: what an image of a stack is called and carries (`plan`), and how
it reaches a registry or another engine (`share`). Docker itself is `gpuenv.engine`'s."""
