"""Identifiers with their check digits: IBAN (ISO 13616, mod 97-10 of ISO 7064), Hungarian tax
number (adószám) and bank account (giro) number, German VAT id (ISO 7064 MOD 11,10), French SIREN
(Luhn) and VAT key, UK VAT number (mod 97). Every function draws its random digits from `rng`
(a random.Random), so that a seed gives the same identifiers on every run."""

IBAN_LENGTH = {"HU": 28, "DE": 22, "FR": 27, "GB": 22, "AT": 20, "NL": 18}


def digits(rng, n):
    return "".join(str(rng.randrange(10)) for _ in range(n))


def iban_check_digits(country, bban):
    """The two check digits of an IBAN: 98 - (BBAN + country letters as numbers + '00') mod 97."""
    rearranged = bban + country + "00"
    as_number = "".join(str(int(c, 36)) for c in rearranged)
    return "%02d" % (98 - int(as_number) % 97)


def iban_valid(iban):
    s = iban.replace(" ", "").upper()
    if len(s) < 15 or not s[:2].isalpha() or IBAN_LENGTH.get(s[:2], len(s)) != len(s):
        return False
    rearranged = s[4:] + s[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def iban_groups(iban):
    """Paper format: groups of four separated by spaces."""
    return " ".join(iban[i:i + 4] for i in range(0, len(iban), 4))


def hu_giro_check(d):
    """Check digit for a group of 7 or 15 digits of a Hungarian bank account: weights 9,7,3,1
    repeating, the check digit makes the weighted sum divisible by 10."""
    w = [9, 7, 3, 1]
    s = sum(int(c) * w[i % 4] for i, c in enumerate(d))
    return str((10 - s % 10) % 10)


def hu_account(rng):
    """A Hungarian 3x8 giro account number: 8 digits (bank 3, branch 4, check 1) and 16 digits
    (15 + check). Returns (printed '12345678-12345678-12345678', IBAN)."""
    bank = rng.choice(["117", "104", "109", "120", "116", "107", "101", "103"])
    head = bank + digits(rng, 4)
    head += hu_giro_check(head)
    body = digits(rng, 15)
    body += hu_giro_check(body)
    printed = "%s-%s-%s" % (head, body[:8], body[8:])
    bban = head + body
    return printed, "HU" + iban_check_digits("HU", bban) + bban


def iban(rng, country):
    if country == "HU":
        return hu_account(rng)[1]
    if country == "DE":
        bban = digits(rng, 8) + digits(rng, 10)
    elif country == "FR":
        bank, branch, acct = digits(rng, 5), digits(rng, 5), digits(rng, 11)
        key = 97 - (89 * int(bank) + 15 * int(branch) + 3 * int(acct)) % 97
        bban = bank + branch + acct + "%02d" % key
    elif country == "GB":
        bban = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(4)) + digits(rng, 14)
    elif country == "AT":
        bban = digits(rng, 16)
    else:
        raise ValueError("no IBAN format for " + country)
    return country + iban_check_digits(country, bban) + bban


def hu_tax_base_check(base7):
    """Check digit of the 8-digit base of a Hungarian tax number: weights 9,7,3,1,9,7,3 over the
    first seven digits, check = (10 - sum mod 10) mod 10."""
    w = [9, 7, 3, 1, 9, 7, 3]
    return str((10 - sum(int(c) * x for c, x in zip(base7, w)) % 10) % 10)


def hu_tax_number(rng, vat_code=None):
    """Hungarian adószám 'xxxxxxxy-z-ww': base with check digit, VAT status code (1 exempt,
    2 VAT payer, 3 simplified, 4 group, 5 group member), county code (02-20, 22-44, 51)."""
    base = str(rng.randrange(1, 10)) + digits(rng, 6)
    base += hu_tax_base_check(base)
    code = vat_code or rng.choice("22222234")
    county = rng.choice(["41", "42", "43", "13", "01", "02", "03", "05", "06", "07", "08", "09",
                         "10", "11", "12", "14", "15", "16", "17", "18", "19", "20", "44", "51"])
    return "%s-%s-%s" % (base, code, county), "HU" + base


def hu_tax_valid(tax):
    base = tax.replace("HU", "").split("-")[0]
    return len(base) == 8 and base.isdigit() and hu_tax_base_check(base[:7]) == base[7]


def de_vat_check(d8):
    """ISO 7064 MOD 11,10 check digit of the German USt-IdNr (8 digits -> 9th)."""
    product = 10
    for c in d8:
        s = (int(c) + product) % 10
        if s == 0:
            s = 10
        product = (2 * s) % 11
    return str((11 - product) % 10)


def de_ids(rng):
    """(Steuernummer as printed 'FFF/BBB/UUUUP', USt-IdNr 'DE' + 9 digits)."""
    d8 = str(rng.randrange(1, 10)) + digits(rng, 7)
    st = "%s/%s/%s" % (digits(rng, 3), digits(rng, 3), digits(rng, 5))
    return st, "DE" + d8 + de_vat_check(d8)


def luhn_check(d):
    total = 0
    for i, c in enumerate(reversed(d)):
        n = int(c)
        if i % 2 == 0:
            n *= 2
            if n > 9:
                n -= 9
        total += n
    return str((10 - total % 10) % 10)


def fr_ids(rng):
    """(SIREN 9 digits with Luhn check, VAT 'FR' + key + SIREN; key = (12 + 3 * (SIREN mod 97)) mod 97)."""
    d8 = str(rng.randrange(1, 10)) + digits(rng, 7)
    siren = d8 + luhn_check(d8)
    key = (12 + 3 * (int(siren) % 97)) % 97
    return siren, "FR%02d%s" % (key, siren)


def gb_vat(rng):
    """UK VAT registration number 'GB' + 9 digits: weights 8..2 over the first 7 digits, the
    last two make the sum (+ 55 in the post-2010 scheme) divisible by 97; we use the classic scheme."""
    while True:
        d7 = str(rng.randrange(1, 10)) + digits(rng, 6)
        s = sum(int(c) * w for c, w in zip(d7, range(8, 1, -1)))
        check = (-s) % 97
        if check < 100:
            return "GB" + d7 + "%02d" % check


def vat_id_valid(v):
    v = v.replace(" ", "")
    cc, rest = v[:2], v[2:]
    if cc == "HU":
        return len(rest) == 8 and rest.isdigit() and hu_tax_base_check(rest[:7]) == rest[7]
    if cc == "DE":
        return len(rest) == 9 and rest.isdigit() and de_vat_check(rest[:8]) == rest[8]
    if cc == "FR":
        siren = rest[2:]
        return len(rest) == 11 and siren.isdigit() and luhn_check(siren[:8]) == siren[8] and \
            int(rest[:2]) == (12 + 3 * (int(siren) % 97)) % 97
    if cc == "GB":
        return len(rest) == 9 and rest.isdigit() and \
            (sum(int(c) * w for c, w in zip(rest[:7], range(8, 1, -1))) + int(rest[7:])) % 97 == 0
    return False
