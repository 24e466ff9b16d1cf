"""A password hasher that counts how often it runs, so a test can show a refused login never
reached hashing (set through PASSWORD_HASHERS, like any hasher)."""

from django.contrib.auth.hashers import MD5PasswordHasher


class CountingHasher(MD5PasswordHasher):
    algorithm = "counting_md5"
    runs = 0

    def encode(self, password, salt):
        CountingHasher.runs += 1
        return super().encode(password, salt)

    def verify(self, password, encoded):
        CountingHasher.runs += 1
        return super().verify(password, encoded)
